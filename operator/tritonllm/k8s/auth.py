"""Where the API server is and how to prove who we are: a kubeconfig, or the pod's service account.

A kubeconfig is read the way kubectl reads it (an explicit path, else the first of $KUBECONFIG,
else ~/.kube/config; its current context): the server, the CA (file or data, or no verification),
and a client certificate (file or data), a bearer token (inline or from a file), or an exec
plugin (client.authentication.k8s.io ExecCredential: run again when its token expires). In a pod,
the service account: the API server from KUBERNETES_SERVICE_HOST/PORT, its CA, and its token file,
read again as the kubelet rotates it.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import json
import os
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# A token file is read again at most this often (the kubelet rotates projected tokens hourly).
TOKEN_FILE_SECONDS = 60.0


class ConfigError(RuntimeError):
    """No usable kubeconfig or in-cluster configuration."""


@dataclasses.dataclass
class Credentials:
    server: str
    ssl: ssl.SSLContext
    token: str | None = None
    token_file: str | None = None
    exec_config: dict[str, Any] | None = None
    _token_at: float = 0.0
    _expires: float = 0.0

    def authorization(self) -> str | None:
        """The Authorization header value (None: the client certificate authenticates)."""
        now = time.monotonic()
        if self.token_file and now - self._token_at > TOKEN_FILE_SECONDS:
            self.token = Path(self.token_file).read_text().strip()
            self._token_at = now
        if self.exec_config is not None and (self.token is None or now >= self._expires):
            self.token, self._expires = _exec_token(self.exec_config)
        return f"Bearer {self.token}" if self.token else None


def load_credentials(kubeconfig: str | None = None) -> Credentials:
    """From `kubeconfig` when given, else $KUBECONFIG or ~/.kube/config, else in-cluster."""
    path = kubeconfig or (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0] or None
    if path is None and Path("~/.kube/config").expanduser().exists():
        path = str(Path("~/.kube/config").expanduser())
    if path is not None:
        return from_kubeconfig(Path(path).expanduser())
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return in_cluster()
    raise ConfigError("no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not in a pod")


def in_cluster() -> Credentials:
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]
    host = f"[{host}]" if ":" in host else host
    context = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT / "ca.crt"))
    return Credentials(f"https://{host}:{port}", context, token_file=str(SERVICE_ACCOUNT / "token"))


def _named(items: list[dict[str, Any]], name: str, what: str) -> dict[str, Any]:
    for item in items or []:
        if item.get("name") == name:
            return dict(item.get(what) or {})
    raise ConfigError(f"kubeconfig has no {what} named {name!r}")


def from_kubeconfig(path: Path) -> Credentials:
    config = yaml.safe_load(path.read_text()) or {}
    current = config.get("current-context")
    if not current:
        raise ConfigError(f"{path}: no current-context")
    context = _named(config.get("contexts", []), current, "context")
    cluster = _named(config.get("clusters", []), context["cluster"], "cluster")
    user = _named(config.get("users", []), context["user"], "user") if context.get("user") else {}
    base = path.parent
    tls = _ssl_context(cluster, user, base)
    token_file = user.get("tokenFile")
    return Credentials(
        cluster["server"].rstrip("/"),
        tls,
        token=user.get("token"),
        token_file=str(base / token_file) if token_file else None,
        exec_config=user.get("exec"),
    )


def _file(entry: dict[str, Any], key: str, base: Path) -> str | None:
    """The path of a kubeconfig file field, or of a private copy of its -data twin."""
    if entry.get(key):
        return str(base / entry[key])
    data = entry.get(f"{key}-data")
    if not data:
        return None
    fd, name = tempfile.mkstemp(prefix="tritonllm-kubeconfig-")
    with os.fdopen(fd, "wb") as f:  # mkstemp: 0600, removed with the process's /tmp
        f.write(base64.b64decode(data))
    return name


def _ssl_context(cluster: dict[str, Any], user: dict[str, Any], base: Path) -> ssl.SSLContext:
    if cluster.get("insecure-skip-tls-verify"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = ssl.create_default_context(cafile=_file(cluster, "certificate-authority", base))
    cert, key = _file(user, "client-certificate", base), _file(user, "client-key", base)
    if cert and key:
        context.load_cert_chain(cert, key)
    return context


def _exec_token(spec: dict[str, Any]) -> tuple[str, float]:
    """Run a client-go exec credential plugin; (token, monotonic time to run it again)."""
    env = {**os.environ, **{e["name"]: e["value"] for e in spec.get("env") or []}}
    out = subprocess.run(
        [spec["command"], *(spec.get("args") or [])],
        env=env, capture_output=True, text=True, check=True, timeout=60,
    )
    status = json.loads(out.stdout).get("status") or {}
    token = status.get("token")
    if not token:
        raise ConfigError(f"exec plugin {spec['command']} returned no token")
    expires = status.get("expirationTimestamp")
    ttl = 300.0
    if expires:
        at = dt.datetime.fromisoformat(expires.replace("Z", "+00:00"))
        ttl = max(0.0, (at - dt.datetime.now(dt.UTC)).total_seconds() - 60)
    return token, time.monotonic() + ttl
