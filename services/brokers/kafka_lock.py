"""The exact jars an Apache Kafka 4.1.1 broker (KRaft) runs on, pinned by checksum.

Generated once (2026-12-01) from Maven's resolution of ``kafka-pom.xml``
(``mvn dependency:copy-dependencies -DincludeScope=runtime``: 46 jars), with every SHA-1
checked against the ``.sha1`` file Maven Central publishes next to the jar, and the SHA-256
computed from those verified bytes. With the lock, no Maven is needed at run time and a jar
that changed on the way (a proxy, a corrupt mirror) is refused instead of run.

To lock another version: resolve ``kafka-pom.xml`` with ``-Dkafka.version=X`` as above, and
add a tuple here built the same way (group, artifact, version, sha1, sha256, size).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KAFKA_JAR_LOCKS", "LockedJar"]


@dataclass(frozen=True)
class LockedJar:
    """One jar of the broker's classpath: its Maven coordinates, checksums and size.

    Both digests are kept: SHA-1 is what Maven Central publishes (so the lock can be checked
    against it again), SHA-256 is what a download is verified with.
    """

    group: str
    artifact: str
    version: str
    sha1: str
    sha256: str
    size: int

    @property
    def file_name(self) -> str:
        """The name Maven gives the jar, and the one it has in the cache."""
        return f"{self.artifact}-{self.version}.jar"

    @property
    def path(self) -> str:
        """Its path in a Maven repository (``org/apache/kafka/kafka_2.13/4.1.1/...``)."""
        group = self.group.replace(".", "/")
        return f"{group}/{self.artifact}/{self.version}/{self.file_name}"


_KAFKA_4_1_1 = (
    LockedJar(
        "com.dynatrace.hash4j",
        "hash4j",
        "0.22.0",
        "2d61bfb5b38469cb76141b06dc68d36a9007e9ad",
        "23028a3fd006e530bf495f551083208187cafd8f80624d048eba56442f16a50e",
        316573,
    ),
    LockedJar(
        "com.fasterxml.jackson.core",
        "jackson-annotations",
        "2.19.0",
        "fd1e7c56de1e5b658563c8c66d5074cceb4e3a0b",
        "ead60e9cac0e42b57092b9e2d087ff43536e9477d4486ba393037a8cc156cda7",
        78580,
    ),
    LockedJar(
        "com.fasterxml.jackson.core",
        "jackson-core",
        "2.19.0",
        "a90640e59ea42632a8e331ff1d6b706cf306050a",
        "da8e859bac94874528116a25f20c68560e4287acbf27628711b8a4f96b028430",
        599926,
    ),
    LockedJar(
        "com.fasterxml.jackson.core",
        "jackson-databind",
        "2.19.0",
        "b3f7506f6414fb04760561eec11a0880165c2a4a",
        "ceda311f476c3b18e1d2b240c94e2dcb9c8d44e70f8afa9facab88bac4ddc03a",
        1678748,
    ),
    LockedJar(
        "com.fasterxml.jackson.dataformat",
        "jackson-dataformat-csv",
        "2.19.0",
        "b7275a6795c70304e8b399db31b11ac72d6bc954",
        "bec1150426b0616bb488149b952b45a0dcb16d9416b017c38f6455ad9389bc68",
        106990,
    ),
    LockedJar(
        "com.fasterxml.jackson.dataformat",
        "jackson-dataformat-yaml",
        "2.19.0",
        "2d735ab4ecebf5c2bf248d4036fd4ba6d73d0cc1",
        "46e54dcbd39d4d12cda18ec9276e7b888e08fc765ea0c77e71662306f0d4abc4",
        60230,
    ),
    LockedJar(
        "com.fasterxml.jackson.datatype",
        "jackson-datatype-jdk8",
        "2.19.0",
        "69312135ff6d6646203b9681fa48505f369210a6",
        "04f1a3f9da8155995dd00098d6847cdb9b7af67f4a3028c94031eff017c8e3e5",
        36215,
    ),
    LockedJar(
        "com.github.ben-manes.caffeine",
        "caffeine",
        "3.2.0",
        "35eba09997476a39492ac7f7b2bb0e8292c09d17",
        "ec411dfdf0c03f25218648ce89861630b71680e5858a9a7278ebac8e55cab3d7",
        906581,
    ),
    LockedJar(
        "com.github.luben",
        "zstd-jni",
        "1.5.6-10",
        "7e146ecb598af55d1f64d1c118af27569a848558",
        "b6c3237e24b8252a5a9c3a0e1ae30ef8f323412e74bd358548b7a9e527d676df",
        7305999,
    ),
    LockedJar(
        "com.google.re2j",
        "re2j",
        "1.8",
        "12c25e923e9e4fb1575a7640a2698745c6f19a94",
        "7b52c72156dd7f98b3237a5b35c1d34fba381b21048c89208913ad80a45dfbd7",
        114335,
    ),
    LockedJar(
        "com.typesafe.scala-logging",
        "scala-logging_2.13",
        "3.9.5",
        "d5a0f61168371d8cff1c510f55407aa46bea8366",
        "87a3017d3f43e6ace7566fe4c3d615134c6914ff871c8d64bb32ca1d996d0545",
        61858,
    ),
    LockedJar(
        "com.yammer.metrics",
        "metrics-core",
        "2.2.0",
        "f82c035cfa786d3cbec362c38c22a5f5b1bc8724",
        "6b7a14a6f34c10f8683f7b5e2f39df0f07b58c7dff0e468ebbc713905c46979c",
        82123,
    ),
    LockedJar(
        "commons-beanutils",
        "commons-beanutils",
        "1.9.4",
        "d52b9abcd97f38c81342bb7e7ae1eee9b73cba51",
        "7d938c81789028045c08c065e94be75fc280527620d5bd62b519d5838532368a",
        246918,
    ),
    LockedJar(
        "commons-collections",
        "commons-collections",
        "3.2.2",
        "8ad72fe39fa8c91eaaf12aadb21e0c3661fe26d5",
        "eeeae917917144a68a741d4c0dff66aa5c5c5fd85593ff217bced3fc8ca783b8",
        588337,
    ),
    LockedJar(
        "commons-digester",
        "commons-digester",
        "2.1",
        "73a8001e7a54a255eef0f03521ec1805dc738ca0",
        "e0b2b980a84fc6533c5ce291f1917b32c507f62bcad64198fff44368c2196a3d",
        196768,
    ),
    LockedJar(
        "commons-logging",
        "commons-logging",
        "1.3.2",
        "3dc966156ef19d23c839715165435e582fafa753",
        "6b858424f518015f32bfcd1183a373f4a827d72d026b6031da0c91cf0e8f3489",
        71613,
    ),
    LockedJar(
        "commons-validator",
        "commons-validator",
        "1.9.0",
        "26e49d333890ccad072eb530a85fceb9c07818df",
        "c3c14748e2d78db58df88808740711bd643b32c45ffa7b8a739f00fb467cd7d7",
        201424,
    ),
    LockedJar(
        "net.sf.jopt-simple",
        "jopt-simple",
        "5.0.4",
        "4fdac2fbe92dfad86aa6e9301736f6b4342a3f5c",
        "df26cc58f235f477db07f753ba5a3ab243ebe5789d9f89ecf68dd62ea9a66c28",
        78146,
    ),
    LockedJar(
        "net.sourceforge.argparse4j",
        "argparse4j",
        "0.7.0",
        "6f0621d0c3888de39e0f06d01f37ba53a798e657",
        "65ceb669d88f63306c680f8088bbf765bbca72d288a61a03703000076c3d3f56",
        90347,
    ),
    LockedJar(
        "org.apache.kafka",
        "kafka-clients",
        "4.1.1",
        "094cb8f39c3157038ec9577634d310a2bf5fb516",
        "00247122a572c3d3ae4eb60a50192a5811bc0181f51923d13018600f892e821d",
        9766726,
    ),
    LockedJar(
        "org.apache.kafka",
        "kafka-coordinator-common",
        "4.1.1",
        "a404eaac7fc653d63453005ab003bf308599f87d",
        "2072fc1ce7e0505149bba22a463a5909a899c6235c4fa696f15c21194a7baf60",
        100775,
    ),
    LockedJar(
        "org.apache.kafka",
        "kafka-group-coordinator",
        "4.1.1",
        "5d0e09fc27c29c7186fe94116712a09d00f29979",
        "3eb5a673b69d5992cfa86c5436f39adbf4ce284046a4c999ec6af0a8e31c5589",
        914943,
    ),
    LockedJar(
        "org.apache.kafka",
        "kafka-group-coordinator-api",
        "4.1.1",
        "40b61cb614687a50188f3c5fa7cf65dbcd059221",
        "3d1801d2329dcf7d273796a034d61e6c7e0f851f384d0afbdd3a2e6cbd17a968",
        11914,
    ),
    LockedJar(
        "org.apache.kafka",
        "kafka-metadata",
        "4.1.1",
        "a11c8a6e27aa783ec3e8b4b7f5c318281fa494a8",
        "a689665751415b6456de1ecb013042cb7ba99ac68fd8c3e8bf28e098feb43218",
        840858,
    ),
    LockedJar(
        "org.apache.kafka",
        "kafka-raft",
        "4.1.1",
        "b5bae33d2adf96738119e40f76c283d24cc58361",
        "4810c93d93d1935dd54de61c5ba130f501c7fe11bc49ccd3ee05ec857818a72a",
        309751,
    ),
    LockedJar(
        "org.apache.kafka",
        "kafka-server",
        "4.1.1",
        "947c8b919656c51c431bae9cd9196f8d0911c5b6",
        "9f6aff422855491aad54326eca8d604163d6d3a6507cc48ffe3ce6de73caf79a",
        219116,
    ),
    LockedJar(
        "org.apache.kafka",
        "kafka-server-common",
        "4.1.1",
        "1bf567866482bd9d7a8ad3eb73b3ffbab51a6b5b",
        "207edecd8322cf6c13d76d84addea7fd0ec441dc8d698cf69df43210ccdc0a94",
        371073,
    ),
    LockedJar(
        "org.apache.kafka",
        "kafka-share-coordinator",
        "4.1.1",
        "eed38c6dba008d378cfa24f8d9212ece225a56bd",
        "e6bec53428c77bf6579321836d482542a93575f7c08e860a26c9f2c7f6059dac",
        111777,
    ),
    LockedJar(
        "org.apache.kafka",
        "kafka-storage",
        "4.1.1",
        "9419c2775056356d815db7681dda97e2670e8dd7",
        "1f85b82853eaec0143efbef7e3a4d4be8929ff83a386326431e0c2d0a557e58c",
        591039,
    ),
    LockedJar(
        "org.apache.kafka",
        "kafka-storage-api",
        "4.1.1",
        "b571e6253b711ad633174a283232e5f26b107718",
        "8c0a712472185d706c6bf5ae24bf5d84a8e396fd4745c708e6146a415f7fa7f7",
        26987,
    ),
    LockedJar(
        "org.apache.kafka",
        "kafka-tools-api",
        "4.1.1",
        "e9dd9701e3d13cfd6c6b84ce7bfd11769641e937",
        "542b08fe20cf872a2d866acdff61ea338b469219dc2ebfae727a1d9ea5737e1a",
        9072,
    ),
    LockedJar(
        "org.apache.kafka",
        "kafka-transaction-coordinator",
        "4.1.1",
        "d0f94fcfb53a7574262750ebf465b484d0841859",
        "a261b5730ac9e3205df7af5d45180d851e9d5f729ce1275c67511a6f51f73755",
        50212,
    ),
    LockedJar(
        "org.apache.kafka",
        "kafka_2.13",
        "4.1.1",
        "3183b1bb5d0209dce5634cf56e8893cf42b17467",
        "e89428126cc7630a802123ba27aac4442816840b66d60670226feaff65f24fd1",
        2063699,
    ),
    LockedJar(
        "org.apache.logging.log4j",
        "log4j-api",
        "2.24.3",
        "b02c125db8b6d295adf72ae6e71af5d83bce2370",
        "5b4a0a0cd0e751ded431c162442bdbdd53328d1f8bb2bae5fc1bbeee0f66d80f",
        348513,
    ),
    LockedJar(
        "org.apache.logging.log4j",
        "log4j-core",
        "2.24.3",
        "7f6a261243ca767c7f38fd4b542bcde626c8894e",
        "7eb4084596ae25bd3c61698e48e8d0ab65a9260758884ed5cbb9c6e55c44a56a",
        1914666,
    ),
    LockedJar(
        "org.apache.logging.log4j",
        "log4j-slf4j-impl",
        "2.24.3",
        "182894dfec8b730639c9ea065f1084ba85fcbaa3",
        "40dec251164d1576e000968cd02e56a1125f46b91fb694a06dfa168f1335da48",
        25319,
    ),
    LockedJar(
        "org.bitbucket.b_c",
        "jose4j",
        "0.9.6",
        "357a3836bb5da16f314f3a1e954518e5468cd915",
        "7314af50cde9c99e8eaf43eee617a23edcc6bb43036221064355094999d837ef",
        299502,
    ),
    LockedJar(
        "org.hdrhistogram",
        "HdrHistogram",
        "2.2.2",
        "7959933ebcc0f05b2eaa5af0a0c8689fa257b15c",
        "22d1d4316c4ec13a68b559e98c8256d69071593731da96136640f864fa14fad8",
        177206,
    ),
    LockedJar(
        "org.jspecify",
        "jspecify",
        "1.0.0",
        "7425a601c1c7ec76645a78d22b8c6a627edee507",
        "1fad6e6be7557781e4d33729d49ae1cdc8fdda6fe477bb0cc68ce351eafdfbab",
        3819,
    ),
    LockedJar(
        "org.lz4",
        "lz4-java",
        "1.8.0",
        "4b986a99445e49ea5fbf5d149c4b63f6ed6c6780",
        "d74a3334fb35195009b338a951f918203d6bbca3d1d359033dc33edd1cadc9ef",
        682804,
    ),
    LockedJar(
        "org.pcollections",
        "pcollections",
        "4.0.2",
        "c8398b4443deae11e6eaffbc04a371b4eb8f6b8e",
        "2bbeef5797a241300c4f7513cd546239629ed7deda4fc0c31df90bb95f5f13ef",
        73718,
    ),
    LockedJar(
        "org.scala-lang",
        "scala-library",
        "2.13.16",
        "9e064d9304904fd7b6bd2b55a9e601b8c1c9006e",
        "1ebb2b6f9e4eb4022497c19b1e1e825019c08514f962aaac197145f88ed730f1",
        5926340,
    ),
    LockedJar(
        "org.scala-lang",
        "scala-reflect",
        "2.13.16",
        "4958d4e43faf2d6d66f18ce2aa9a3e5ba141f87b",
        "fb49ccd9cac7464486ab993cda20a3c1569d8ef26f052e897577ad2a4970fb1d",
        3801119,
    ),
    LockedJar(
        "org.slf4j",
        "slf4j-api",
        "1.7.36",
        "6c62681a2f655b49963a5983b8b0950a6120ae14",
        "d3ef575e3e4979678dc01bf1dcce51021493b4d11fb7f1be8ad982877c16a1c0",
        41125,
    ),
    LockedJar(
        "org.xerial.snappy",
        "snappy-java",
        "1.1.10.7",
        "3049f95640f4625a945cfab85715f603fa4c8f80",
        "4c766cb3f855415ee734b2392949a0b6f12a60879334a74518deaf6270d32e36",
        2338496,
    ),
    LockedJar(
        "org.yaml",
        "snakeyaml",
        "2.4",
        "e0666b825b796f85521f02360e77f4c92c5a7a07",
        "ef779af5d29a9dde8cc70ce0341f5c6f7735e23edff9685ceaa9d35359b7bb7f",
        339825,
    ),
)

#: Kafka version -> the jars of its broker, sorted by group and artifact.
KAFKA_JAR_LOCKS: dict[str, tuple[LockedJar, ...]] = {"4.1.1": _KAFKA_4_1_1}
