"""Fetch an Apache Kafka broker classpath from Maven Central, once per version, into a cache.

Why Maven and not a tarball: Maven Central is the one artifact source every machine we target can
reach, the artifacts are checksummed by Maven, and the version is a plain setting.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

from rolltape.infra.broker._errors import BrokerStartError

_DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1:copy-dependencies"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>rolltape.local</groupId>
  <artifactId>kafka-broker-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{dependencies}
  </dependencies>
</project>
"""

_DEP = (
    "    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
    "<version>{v}</version></dependency>"
)


def uses_log4j2(kafka_version: str) -> bool:
    """Kafka 4.x logs through log4j2; 3.x through reload4j (log4j 1 API)."""
    return int(kafka_version.split(".")[0]) >= 4


_CLASSPATH = 2
"""What a cached classpath holds; a cache made for an older one is fetched again. 2: Kafka's
command-line tools (`kafka-tools`: kafka-consumer-groups, the console consumer) beside the broker."""


def _dependencies(kafka_version: str, scala_version: str) -> list[tuple[str, str, str]]:
    deps = [
        ("org.apache.kafka", f"kafka_{scala_version}", kafka_version),
        ("org.apache.kafka", "kafka-tools", kafka_version),
    ]
    if uses_log4j2(kafka_version):
        deps += [
            ("org.apache.logging.log4j", "log4j-core", "2.24.3"),
            ("org.apache.logging.log4j", "log4j-slf4j2-impl", "2.24.3"),
        ]
    else:
        # 3.9.x publishes no logging backend; without one the broker logs nothing at all.
        deps += [
            ("org.slf4j", "slf4j-reload4j", "1.7.36"),
            ("ch.qos.reload4j", "reload4j", "1.2.25"),
        ]
    return deps


_COMPLETE = f".complete-{_CLASSPATH}"


def _cache_home(kafka_version: str, scala_version: str, cache_dir: Path) -> Path:
    return cache_dir / f"kafka_{scala_version}-{kafka_version}"


def kafka_jars_cached(kafka_version: str, scala_version: str, cache_dir: Path) -> bool:
    """Whether `kafka_classpath` will find the jars without a download: a caller about to start
    the broker for the first time can say that Maven is fetching, not hanging."""
    return (_cache_home(kafka_version, scala_version, cache_dir) / _COMPLETE).exists()


def kafka_classpath(kafka_version: str, scala_version: str, cache_dir: Path) -> Path:
    """Return a folder of jars that runs `kafka.Kafka` and Kafka's tools (`kafka-tools`); fetch
    it with Maven the first time."""
    home = _cache_home(kafka_version, scala_version, cache_dir)
    libs = home / "libs"
    done = home / _COMPLETE
    if done.exists():
        return libs
    mvn = shutil.which("mvn")
    if mvn is None:
        raise BrokerStartError(
            "Maven (mvn) is not on PATH, so the Kafka jars cannot be fetched. Install Maven and "
            "Java 17, or point ROLLTAPE_BOOTSTRAP at an existing Kafka cluster."
        )
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs fetching at once share one download
        if done.exists():
            return libs
        pom = home / "pom.xml"
        deps = "\n".join(
            _DEP.format(g=g, a=a, v=v) for g, a, v in _dependencies(kafka_version, scala_version)
        )
        pom.write_text(_POM.format(dependencies=deps))
        if libs.exists():
            shutil.rmtree(libs)
        cmd = [
            mvn,
            "-q",
            "-B",
            "-f",
            str(pom),
            _DEPENDENCY_PLUGIN,
            "-DincludeScope=runtime",
            f"-DoutputDirectory={libs}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise BrokerStartError(
                f"Maven could not fetch Apache Kafka {kafka_version} (scala {scala_version}): "
                f"{(proc.stdout + proc.stderr).strip()[-2000:]}\n"
                "Check that Maven Central is reachable and the version exists "
                "(ROLLTAPE_KAFKA_VERSION)."
            )
        done.write_text(kafka_version)
    return libs
