"""A real S3-compatible server on loopback for the tests: s3proxy (Maven Central, resolved by
bin/bootstrap into .scg/jars/s3proxy) with its filesystem backend. It honours If-None-Match, the
put-if-absent deltalake's S3 commits rely on. Every wait is bounded."""
from __future__ import annotations

import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from pipelines.local.local_kafka import free_port
from pipelines.runtime.install_paths import jar_files

ACCESS_KEY, SECRET_KEY, REGION = "scg-test-key", "scg-test-secret-7d1f", "us-east-1"
READY_TIMEOUT_S = 60.0


class S3Server:
    """One s3proxy process; buckets are directories under ``workdir/data`` (filesystem backend)."""

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.data = self.workdir / "data"
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> "S3Server":
        self.data.mkdir(parents=True, exist_ok=True)
        props = self.workdir / "s3proxy.properties"
        props.write_text(f"s3proxy.endpoint={self.endpoint}\n"
                         "s3proxy.authorization=aws-v2-or-v4\n"
                         f"s3proxy.identity={ACCESS_KEY}\ns3proxy.credential={SECRET_KEY}\n"
                         "s3proxy.virtual-host=\n"
                         "jclouds.provider=filesystem\n"
                         f"jclouds.filesystem.basedir={self.data}\n")
        log = open(self.workdir / "s3proxy.log", "w")
        self.proc = subprocess.Popen(["java", "-Xmx256m", "-jar", str(jar_files("s3proxy")[0]),
                                      "--properties", str(props)], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._answers():
            if self.proc.poll() is not None:
                raise RuntimeError(f"s3proxy exited ({self.proc.returncode}); see {log.name}")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"s3proxy not ready within {READY_TIMEOUT_S:.0f}s; see {log.name}")
            time.sleep(0.1)
        return self

    def _answers(self) -> bool:
        try:
            urllib.request.urlopen(self.endpoint + "/", timeout=1)
            return True
        except urllib.error.HTTPError:  # 403 without credentials: it is up
            return True
        except OSError:
            return False

    def make_bucket(self, name: str) -> str:
        """A bucket (S3 names: 3 to 63 characters; s3proxy answers NoSuchBucket for shorter ones)."""
        if not 3 <= len(name) <= 63:
            raise ValueError(f"bucket name {name!r} must have 3 to 63 characters")
        (self.data / name).mkdir(parents=True, exist_ok=True)
        return name

    def storage_yaml(self, key_var: str = "SCG_S3_ACCESS_KEY", secret_var: str = "SCG_S3_SECRET_KEY",
                     endpoint: str | None = None) -> str:
        """A pipeline ``storage:`` section for this server, credentials as ``${ENV}`` references
        (give the process :meth:`credentials_env`); ``endpoint`` overrides the server's."""
        lines = ["storage:", f"  endpoint: {endpoint or self.endpoint}", f"  region: {REGION}",
                 "  path_style: true", f'  access_key_id: "${{{key_var}}}"',
                 f'  secret_access_key: "${{{secret_var}}}"']
        return "".join(f"{line}\n" for line in lines)

    def delta_options(self) -> dict[str, str]:
        """deltalake storage options for this server (plain HTTP, path-style requests), for code
        that opens a table directly rather than through a pipeline's ``storage:`` section."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": REGION, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_ALLOW_HTTP": "true",
                "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false"}

    @staticmethod
    def credentials_env(key_var: str = "SCG_S3_ACCESS_KEY", secret_var: str = "SCG_S3_SECRET_KEY",
                        secret: str = SECRET_KEY) -> dict[str, str]:
        """The environment :meth:`storage_yaml`'s references resolve from (``secret`` may be wrong)."""
        return {key_var: ACCESS_KEY, secret_var: secret}

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)
        self.proc = None

    def __enter__(self) -> "S3Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
