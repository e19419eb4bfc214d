"""What the tests of real image builds share."""

from __future__ import annotations

# A stand-in for vLLM's stock images (`vllm/vllm-openai:v<version>`), which cannot be pulled here: the Debian base
# (build argument BASE) and a vLLM version (VLLM_VERSION).
STAND_IN = """\
ARG BASE
FROM ${BASE}
ARG VLLM_VERSION
# What glmops' Dockerfile reads of vLLM's images: pip in the system interpreter, and vLLM's distribution record.
# (Debian's ensurepip refuses the system interpreter; pip runs from the wheel Debian ships for venv.)
RUN w=$(ls /usr/share/python-wheels/pip-*.whl) \\
    && python3 "$w/pip" install --quiet --break-system-packages --no-index --no-cache-dir "$w" \\
    && d=/usr/local/lib/python3.11/dist-packages/vllm-${VLLM_VERSION}.dist-info && mkdir -p "$d" \\
    && printf 'Metadata-Version: 2.1\\nName: vllm\\nVersion: %s\\n' "${VLLM_VERSION}" > "$d/METADATA"
"""
