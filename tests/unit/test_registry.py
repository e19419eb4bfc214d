"""The registry client: a tag's digest through the OCI distribution API, with token auth when asked."""

from __future__ import annotations

import base64
import json

import httpx
import pytest

from glm_operator.k8s.registry import Credentials, RegistryError, credentials_for, remote_digest, split_ref

DIGEST = "sha256:" + "cd" * 32
REF = "registry.example.com/glmops/vllm-openai:v0.33.0-glmops.1"
MANIFEST = "https://registry.example.com/v2/glmops/vllm-openai/manifests/v0.33.0-glmops.1"


def transport(answers: dict[str, httpx.Response], seen: list[httpx.Request]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        key = f"{request.method} {request.url.copy_with(query=None)}"
        auth = request.headers.get("Authorization", "")
        return answers.get(f"{key} {auth}".strip()) or answers.get(key) or httpx.Response(599)

    return httpx.MockTransport(handle)


@pytest.mark.parametrize(
    ("ref", "parts"),
    [
        (REF, ("registry.example.com", "glmops/vllm-openai", "v0.33.0-glmops.1")),
        ("localhost:5000/vllm-openai:v1", ("localhost:5000", "vllm-openai", "v1")),
        ("vllm/vllm-openai:v0.33.0", ("docker.io", "vllm/vllm-openai", "v0.33.0")),
        ("ubuntu", ("docker.io", "library/ubuntu", "latest")),
    ],
)
def test_a_reference_splits_into_registry_repository_and_tag(ref: str, parts: tuple[str, str, str]) -> None:
    assert split_ref(ref) == parts


def test_an_existing_tag_gives_the_digest_the_registry_reports() -> None:
    seen: list[httpx.Request] = []
    answers = {f"HEAD {MANIFEST}": httpx.Response(200, headers={"Docker-Content-Digest": DIGEST})}
    assert remote_digest(REF, transport=transport(answers, seen)) == DIGEST
    assert "application/vnd.oci.image.index.v1+json" in seen[0].headers["Accept"]


def test_a_missing_tag_means_build_it() -> None:
    assert remote_digest(REF, transport=transport({f"HEAD {MANIFEST}": httpx.Response(404)}, [])) is None


def test_a_bearer_challenge_is_answered_with_a_token_fetched_with_the_push_credentials() -> None:
    seen: list[httpx.Request] = []
    challenge = (
        'Bearer realm="https://auth.example.com/token",service="registry",scope="repository:glmops/vllm-openai:pull"'
    )
    answers = {
        f"HEAD {MANIFEST}": httpx.Response(401, headers={"WWW-Authenticate": challenge}),
        "GET https://auth.example.com/token": httpx.Response(200, json={"token": "t0k"}),
        f"HEAD {MANIFEST} Bearer t0k": httpx.Response(200, headers={"Docker-Content-Digest": DIGEST}),
    }
    assert remote_digest(REF, Credentials("bot", "pw"), transport=transport(answers, seen)) == DIGEST
    token_request = seen[1]
    assert token_request.url.params["scope"] == "repository:glmops/vllm-openai:pull"
    assert token_request.headers["Authorization"] == "Basic " + base64.b64encode(b"bot:pw").decode()


def test_an_insecure_registry_is_asked_over_plain_http() -> None:
    seen: list[httpx.Request] = []
    answers = {
        f"HEAD {MANIFEST.replace('https', 'http')}": httpx.Response(200, headers={"Docker-Content-Digest": DIGEST})
    }
    assert remote_digest(REF, insecure=True, transport=transport(answers, seen)) == DIGEST


@pytest.mark.parametrize(
    "response",
    [httpx.Response(500), httpx.Response(200, headers={"Docker-Content-Digest": "md5:abc"}), httpx.Response(200)],
    ids=["server-error", "bad-digest", "no-digest"],
)
def test_an_answer_that_is_neither_a_digest_nor_not_found_is_an_error(response: httpx.Response) -> None:
    with pytest.raises(RegistryError):
        remote_digest(REF, transport=transport({f"HEAD {MANIFEST}": response}, []))


def _config(auths: dict[str, dict[str, str]]) -> str:
    return json.dumps({"auths": auths})


@pytest.mark.parametrize(
    ("config", "host", "creds"),
    [
        (
            _config({"registry.example.com": {"auth": base64.b64encode(b"u:p:q").decode()}}),
            "registry.example.com",
            Credentials("u", "p:q"),
        ),
        (
            _config({"https://registry.example.com/v1/": {"username": "u", "password": "p"}}),
            "registry.example.com",
            Credentials("u", "p"),
        ),
        (_config({"other.example.com": {"username": "u", "password": "p"}}), "registry.example.com", None),
        ("", "registry.example.com", None),
    ],
    ids=["auth-field", "url-key", "other-host", "empty"],
)
def test_push_secret_credentials_are_found_for_the_registry_host(
    config: str, host: str, creds: Credentials | None
) -> None:
    assert credentials_for(config, host) == creds
