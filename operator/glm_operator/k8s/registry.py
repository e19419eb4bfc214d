"""Asks an OCI registry for the digest of a tag, so an image already pushed is pinned, not rebuilt.

The OCI distribution API: `HEAD /v2/<repository>/manifests/<tag>` answers with the manifest's
digest in `Docker-Content-Digest`. Registries that want a token answer 401 with a
`WWW-Authenticate: Bearer realm=...,service=...,scope=...` challenge; the token comes from the realm,
with the push Secret's credentials when there are any. Not Kubernetes I/O, but I/O all the same, so
it lives here beside the API client rather than among the pure modules.
"""

from __future__ import annotations

import base64
import json
import re
import ssl
from dataclasses import dataclass

import httpx

from glm_operator.render.imagebuild import registry_host
from glm_operator.render.imagestate import parse_digest

MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


class RegistryError(RuntimeError):
    """The registry answered something other than "here is the digest" or "no such tag"."""


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str


def credentials_for(dockerconfigjson: str, host: str) -> Credentials | None:
    """The credentials a kubernetes.io/dockerconfigjson Secret holds for one registry host, if any."""
    auths = (json.loads(dockerconfigjson or "{}").get("auths") or {}) if dockerconfigjson else {}
    for key, entry in auths.items():
        if key.removeprefix("https://").removeprefix("http://").split("/", 1)[0] != host:
            continue
        if entry.get("username") is not None:
            return Credentials(entry["username"], entry.get("password", ""))
        if entry.get("auth"):
            user, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            return Credentials(user, password)
    return None


def split_ref(ref: str) -> tuple[str, str, str]:
    """(registry host, repository, tag) of an image reference."""
    host = registry_host(ref)
    path = ref.split("/", 1)[1] if ref.startswith(f"{host}/") else ref
    repository, _, tag = path.rpartition(":") if ":" in path.rsplit("/", 1)[-1] else (path, "", "latest")
    if host == "docker.io" and "/" not in repository:
        repository = f"library/{repository}"
    return host, repository, tag


def _token(client: httpx.Client, challenge: str, creds: Credentials | None) -> str:
    params = dict(_CHALLENGE_PARAM.findall(challenge))
    realm = params.pop("realm", "")
    if not realm:
        raise RegistryError(f"registry asked for a token without a realm: {challenge}")
    auth = (creds.username, creds.password) if creds else None
    response = client.get(realm, params=params, auth=auth)
    if response.status_code != 200:
        raise RegistryError(f"token request to {realm} answered {response.status_code}")
    body = response.json()
    token = body.get("token") or body.get("access_token")
    if not token:
        raise RegistryError(f"token response from {realm} holds no token")
    return str(token)


def remote_digest(
    ref: str,
    creds: Credentials | None = None,
    insecure: bool = False,
    transport: httpx.BaseTransport | None = None,
    timeout: float = 10.0,
    ca: str = "",
) -> str | None:
    """The digest of `ref` in its registry, or None when the tag does not exist there. `ca`: PEM certificates to trust
    besides the system's (a registry with a certificate from a private authority)."""
    host, repository, tag = split_ref(ref)
    hostname = "registry-1.docker.io" if host == "docker.io" else host
    url = f"{'http' if insecure else 'https'}://{hostname}/v2/{repository}/manifests/{tag}"
    headers = {"Accept": MANIFEST_TYPES}
    verify: ssl.SSLContext | bool = True
    if ca:
        verify = ssl.create_default_context()
        verify.load_verify_locations(cadata=ca)
    with httpx.Client(transport=transport, timeout=timeout, follow_redirects=True, verify=verify) as client:
        response = client.head(url, headers=headers)
        if response.status_code == 401:
            challenge = response.headers.get("WWW-Authenticate", "")
            if challenge.lower().startswith("bearer"):
                headers["Authorization"] = f"Bearer {_token(client, challenge, creds)}"
                response = client.head(url, headers=headers)
            elif creds is not None:
                response = client.head(url, headers=headers, auth=(creds.username, creds.password))
    if response.status_code == 404:
        return None
    if response.status_code != 200:
        raise RegistryError(f"HEAD {url} answered {response.status_code}")
    digest = parse_digest(response.headers.get("Docker-Content-Digest"))
    if digest is None:
        raise RegistryError(f"HEAD {url} gave no valid Docker-Content-Digest")
    return digest
