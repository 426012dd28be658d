"""Certificates for the local cluster, made with the ``openssl`` command.

Why openssl and not a Python library: it is on every Debian machine and keeps the tooling free of
extra dependencies. One CA signs everything: the API server's serving certificate, the admin
client certificate (group ``system:masters``; the controllers and kubectl all use it) and the
serving certificate of the LeaderWorkerSet webhooks, which the API server calls by URL. The
service-account signing key pair is separate, and so is the front-proxy CA: it signs only the
client certificate the API server presents when it proxies a request to an aggregated API (the
metrics APIs of the autoscaling tier), which those servers trust for the user named in the
request headers. Everything is generated once per cluster state
directory and reused by later ``up`` calls (generation costs a second or two).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from tritonllm_dev.host import GATEWAY
from tritonllm_dev.node import NODE_NAME

#: Days the throw-away certificates are valid.
VALID_DAYS = 3650

#: Common name of the front-proxy client certificate (``--requestheader-allowed-names``).
FRONT_PROXY_CN = "front-proxy-client"

#: The ClusterIP of the ``kubernetes`` Service (first address of the service range).
KUBERNETES_SERVICE_IP = "10.96.0.1"


@dataclass(frozen=True)
class Pki:
    """Paths of the generated files in ``root``."""

    root: Path

    @property
    def ca_crt(self) -> Path:
        return self.root / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.root / "ca.key"

    @property
    def apiserver_crt(self) -> Path:
        return self.root / "apiserver.crt"

    @property
    def apiserver_key(self) -> Path:
        return self.root / "apiserver.key"

    @property
    def admin_crt(self) -> Path:
        return self.root / "admin.crt"

    @property
    def admin_key(self) -> Path:
        return self.root / "admin.key"

    @property
    def node_crt(self) -> Path:
        """Client certificate of the real node's kubelet (``system:node:<name>``)."""
        return self.root / "node.crt"

    @property
    def node_key(self) -> Path:
        return self.root / "node.key"

    @property
    def front_proxy_ca_crt(self) -> Path:
        """CA of the aggregation layer's client certificate (``--requestheader-client-ca-file``)."""
        return self.root / "front-proxy-ca.crt"

    @property
    def front_proxy_ca_key(self) -> Path:
        return self.root / "front-proxy-ca.key"

    @property
    def front_proxy_client_crt(self) -> Path:
        """The API server's client certificate towards aggregated APIs (CN ``FRONT_PROXY_CN``)."""
        return self.root / "front-proxy-client.crt"

    @property
    def front_proxy_client_key(self) -> Path:
        return self.root / "front-proxy-client.key"

    @property
    def sa_key(self) -> Path:
        return self.root / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.root / "sa.pub"

    @property
    def webhook_dir(self) -> Path:
        """Directory with ``tls.crt``/``tls.key`` (controller-runtime's expected names)."""
        return self.root / "webhook"

    def complete(self) -> bool:
        files = [
            self.ca_crt,
            self.ca_key,
            self.apiserver_crt,
            self.apiserver_key,
            self.admin_crt,
            self.admin_key,
            self.node_crt,
            self.node_key,
            self.sa_key,
            self.sa_pub,
            self.front_proxy_ca_crt,
            self.front_proxy_ca_key,
            self.front_proxy_client_crt,
            self.front_proxy_client_key,
            self.webhook_dir / "tls.crt",
            self.webhook_dir / "tls.key",
        ]
        return all(f.is_file() for f in files)


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {proc.stderr.strip()}")


def _signed_cert(
    pki: Pki, name: Path, subject: str, extensions: str, ca: tuple[Path, Path] | None = None
) -> None:
    """Key ``name``.key and certificate ``name``.crt signed by the CA (or ``ca``: certificate
    and key) with ``extensions``."""
    root = pki.root
    ca_crt, ca_key = ca or (pki.ca_crt, pki.ca_key)
    ext = name.with_name(f"{name.name}.ext")  # beside the output
    ext.write_text(f"[e]\n{extensions}\n")
    csr = name.with_name(f"{name.name}.csr")
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        str(csr),
        "-subj",
        subject,
        cwd=root,
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(ca_crt),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-days",
        str(VALID_DAYS),
        "-extfile",
        str(ext),
        "-extensions",
        "e",
        "-out",
        f"{name}.crt",
        cwd=root,
    )
    csr.unlink()
    ext.unlink()


def _self_signed_ca(crt: Path, key: Path, subject: str, root: Path) -> None:
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(crt),
        "-days",
        str(VALID_DAYS),
        "-subj",
        subject,
        cwd=root,
    )


def serving_cert(pki: Pki, base: Path, hosts: list[str], *, client: bool = False) -> Path:
    """A key and certificate ``base``.key/.crt signed by the cluster CA, serving ``hosts`` (IP
    addresses or DNS names), also for client authentication when ``client`` (one pair for both
    ends of a mutual TLS link). Made afresh on each call; returns ``base``."""
    sans = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() else f"DNS:{h}" for h in hosts)
    usage = "serverAuth,clientAuth" if client else "serverAuth"
    _signed_cert(
        pki,
        base,
        f"/CN={base.name}",
        f"subjectAltName={sans}\n"
        f"keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage={usage}",
    )
    return base


def ensure_pki(root: Path) -> Pki:
    """Create the CA and certificates in ``root`` unless they are all there already."""
    pki = Pki(root)
    if pki.complete():
        return pki
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)
    _self_signed_ca(pki.ca_crt, pki.ca_key, "/CN=tritonllm-local-ca", root)
    server_ext = "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth"
    _signed_cert(
        pki,
        root / "apiserver",
        "/CN=kube-apiserver",
        f"subjectAltName=IP:127.0.0.1,IP:{KUBERNETES_SERVICE_IP},IP:{GATEWAY},DNS:localhost,"
        "DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n"
        + server_ext,
    )
    _signed_cert(
        pki,
        root / "admin",
        "/CN=tritonllm-admin/O=system:masters",
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth",
    )
    _signed_cert(
        pki,
        root / "node",
        f"/CN=system:node:{NODE_NAME}/O=system:nodes",
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth",
    )
    pki.webhook_dir.mkdir(exist_ok=True)
    _signed_cert(
        pki,
        root / "webhook",
        "/CN=lws-webhook",
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n" + server_ext,
    )
    (root / "webhook.crt").replace(pki.webhook_dir / "tls.crt")
    (root / "webhook.key").replace(pki.webhook_dir / "tls.key")
    _self_signed_ca(
        pki.front_proxy_ca_crt, pki.front_proxy_ca_key, "/CN=tritonllm-front-proxy-ca", root
    )
    _signed_cert(
        pki,
        root / "front-proxy-client",
        f"/CN={FRONT_PROXY_CN}",
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth",
        ca=(pki.front_proxy_ca_crt, pki.front_proxy_ca_key),
    )
    _openssl("genrsa", "-out", str(pki.sa_key), "2048", cwd=root)
    _openssl("rsa", "-in", str(pki.sa_key), "-pubout", "-out", str(pki.sa_pub), cwd=root)
    return pki
