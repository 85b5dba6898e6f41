"""The Apache Kafka broker's jars: downloaded from Maven Central and checked against a lock.

Why not Maven: ``fairshare up`` must start a crash-safe broker on a machine that has only
Python, and Maven is one more manual install. The lock (`kafka_lock`) pins each jar by
SHA-256, so plain HTTPS downloads are as reproducible as Maven's resolution and safer (Maven
only warns on a bad checksum by default). A download is written to a temporary file in the
cache, verified, then renamed: a corrupt, truncated or interrupted download never lands under
the name the classpath reads, and the next caller starts that jar over.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .handle import BrokerStartError
from .kafka_lock import KAFKA_JAR_LOCKS, LockedJar

__all__ = [
    "KAFKA_VERSION",
    "MAVEN_CENTRAL",
    "REPOSITORY_ENV",
    "default_cache_dir",
    "fetch_kafka_jars",
    "lock_digest",
    "locked_jars",
]

#: The broker version the project is tested against.
KAFKA_VERSION = "4.1.1"
#: Where the jars come from; ``$FAIRSHARE_MAVEN_REPOSITORY`` points at a mirror instead.
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
REPOSITORY_ENV = "FAIRSHARE_MAVEN_REPOSITORY"

_COMPLETE_MARKER = ".complete"
_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+)*([.-][0-9A-Za-z]+)*$")
_ATTEMPTS = 3
_PARALLEL_DOWNLOADS = 6
_CHUNK = 1 << 16


def default_cache_dir() -> Path:
    """``$FAIRSHARE_CACHE_DIR``, else ``~/.cache/fairshare``.

    Outside the repository and the data dirs so the jars (about 44 MB) survive
    ``git clean`` and are shared by every checkout and test session on the machine.
    """
    env = os.environ.get("FAIRSHARE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "fairshare"


def locked_jars(version: str) -> tuple[LockedJar, ...]:
    """The locked jars of ``version``; `BrokerStartError` for a version nobody locked."""
    jars = KAFKA_JAR_LOCKS.get(version)
    if jars is None:
        locked = ", ".join(sorted(KAFKA_JAR_LOCKS))
        raise BrokerStartError(
            f"no jar lock for Apache Kafka {version} (locked: {locked}); see "
            "services/brokers/kafka_lock.py for how to add one"
        )
    return jars


def lock_digest(jars: Sequence[LockedJar]) -> str:
    """A digest of the lock, kept in the cache's completion marker.

    A cache completed under another lock (or by the Maven-based fetch of earlier versions)
    is then checked jar by jar again instead of trusted.
    """
    lines = sorted(f"{j.group}:{j.artifact}:{j.version}:{j.sha256}:{j.size}" for j in jars)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


@contextlib.contextmanager
def _exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` for the duration of the block.

    Parallel test workers may all find the cache empty at once; the lock makes one
    of them fetch while the others wait and then reuse its result.
    """
    with path.open("a", encoding="utf-8") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def fetch_kafka_jars(
    version: str = KAFKA_VERSION,
    cache_dir: Path | None = None,
    *,
    jars: Sequence[LockedJar] | None = None,
    repository: str | None = None,
) -> Path:
    """Return a directory holding exactly the locked runtime jars of Apache Kafka ``version``.

    The first call downloads them into ``<cache>/apache-kafka-<version>/libs``; later calls
    only check that the completion marker matches the lock and every jar has its size (a few
    ``stat`` calls, so a start stays quick). Jars already in the cache are kept if their
    SHA-256 matches, anything else in ``libs`` is removed (the classpath is ``libs/*``).
    ``jars`` and ``repository`` replace the lock and Maven Central (tests, mirrors).
    """
    if not _VERSION_RE.match(version):
        raise BrokerStartError(f"not a Kafka version: {version!r}")
    wanted = tuple(jars) if jars is not None else locked_jars(version)
    source = (repository or os.environ.get(REPOSITORY_ENV) or MAVEN_CENTRAL).rstrip("/")
    root = (cache_dir or default_cache_dir()) / f"apache-kafka-{version}"
    libs = root / "libs"
    digest = lock_digest(wanted)
    if _complete(root, libs, wanted, digest):
        return libs
    try:
        libs.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BrokerStartError(f"cannot create the jar cache {libs}: {exc}") from exc
    with _exclusive_lock(root / ".lock"):
        if _complete(root, libs, wanted, digest):  # another process finished while we waited
            return libs
        (root / _COMPLETE_MARKER).unlink(missing_ok=True)
        _remove_strays(libs, wanted)
        missing = [jar for jar in wanted if not _verified(libs / jar.file_name, jar)]
        _download_all(missing, libs, source)
        tmp = root / (_COMPLETE_MARKER + ".tmp")
        tmp.write_text(digest + "\n", encoding="utf-8")
        tmp.replace(root / _COMPLETE_MARKER)
    return libs


def _complete(root: Path, libs: Path, jars: Sequence[LockedJar], digest: str) -> bool:
    """The marker names this lock and every jar is there with its locked size."""
    try:
        if (root / _COMPLETE_MARKER).read_text(encoding="utf-8").strip() != digest:
            return False
        return all((libs / jar.file_name).stat().st_size == jar.size for jar in jars)
    except OSError:
        return False


def _remove_strays(libs: Path, jars: Sequence[LockedJar]) -> None:
    """Delete files the lock does not name: leftovers of interrupted downloads, older jars."""
    names = {jar.file_name for jar in jars}
    for path in libs.iterdir():
        if path.name not in names and path.is_file():
            path.unlink()


def _verified(path: Path, jar: LockedJar) -> bool:
    """Whether ``path`` holds exactly the locked bytes; a wrong file is deleted."""
    try:
        if path.stat().st_size != jar.size:
            path.unlink()
            return False
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    except FileNotFoundError:
        return False
    if digest.hexdigest() != jar.sha256:
        path.unlink()
        return False
    return True


def _download_all(jars: Sequence[LockedJar], libs: Path, repository: str) -> None:
    """Download ``jars`` a few at a time (44 MB in 46 files is mostly round trips); the
    first failure is raised after the others have finished, so none is left half-written."""
    if not jars:
        return
    with ThreadPoolExecutor(max_workers=_PARALLEL_DOWNLOADS) as pool:
        futures = [pool.submit(_download_with_retries, jar, libs, repository) for jar in jars]
        errors = [future.exception() for future in futures]
    failures = [error for error in errors if error is not None]
    if failures:
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        raise BrokerStartError(f"{failures[0]}{more}")


def _download_with_retries(jar: LockedJar, libs: Path, repository: str) -> None:
    """A few attempts, because a single reset connection should not fail ``fairshare up``."""
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            download_jar(jar, libs, repository)
            return
        except BrokerStartError:
            if attempt == _ATTEMPTS:
                raise
            time.sleep(0.5 * attempt)


def download_jar(jar: LockedJar, libs: Path, repository: str) -> Path:
    """Download one jar into ``libs`` under its own name only if its size and SHA-256 match.

    The bytes go to a hidden temporary file next to the target (same file system, so the
    final rename is atomic); on any failure it is removed and nothing lands in the cache.
    """
    url = f"{repository}/{jar.path}"
    target = libs / jar.file_name
    fd, tmp_name = tempfile.mkstemp(dir=libs, prefix=f".{jar.file_name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        size = 0
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as response:
            while chunk := response.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if size != jar.size or digest.hexdigest() != jar.sha256:
            raise BrokerStartError(
                f"{url}: checksum mismatch (got {size} bytes, sha256 {digest.hexdigest()}; "
                f"the lock says {jar.size} bytes, sha256 {jar.sha256}); not cached"
            )
        tmp.replace(target)
    except (OSError, urllib.error.URLError) as exc:
        raise BrokerStartError(f"could not download {url}: {exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)
    return target
