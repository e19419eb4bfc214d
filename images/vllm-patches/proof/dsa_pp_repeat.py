"""How noisy PP=1 is on real kernels, inside one process: `python dsa_pp_repeat.py VARIANT` on the GPU machine.

Run after `dsa_pp_real.py --variant VARIANT --runs pp1-a --work /tmp/w` (it reads that model and that run). It starts
vLLM once, exactly as a proof run does at PP=1, generates the proof's prompts three times as one batch and once one by
one, and prints each against the first batch, then the first batch against `pp1-a` (another process). Its lines on
an H200, for both variants, are in results/pp1-one-gpu/repeat.log, with the timing lines of the shell loop that ran it
(`pp1-a third process`: a third PP=1 start's seconds; `done at`: seconds since the loop began): the differences are as
large within one process as between two, so they come from the kernels at run time, not from how a process starts.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dsa_pp_real as real  # noqa: E402
from vllm import LLM, SamplingParams  # noqa: E402
from vllm.inputs import TokensPrompt  # noqa: E402

variant = sys.argv[1]
work = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("/tmp/w")
llm = LLM(
    model=str(work / variant / "model"),
    skip_tokenizer_init=True,
    dtype="bfloat16",
    enforce_eager=True,
    enable_prefix_caching=False,
    max_model_len=real.MAX_MODEL_LEN,
    gpu_memory_utilization=0.5,
    seed=0,
    attention_config={"backend": real.ATTENTION_BACKEND},
)
prompts = real.prompt_token_ids()
params = SamplingParams(
    temperature=0.0, max_tokens=real.PROMPTS["generate"], prompt_logprobs=0, ignore_eos=True, detokenize=False
)


def gen(ps):
    res = llm.generate([TokensPrompt(prompt_token_ids=p) for p in ps], params, use_tqdm=False)
    return [
        {
            "prompt_logprobs": [e[t].logprob for t, e in zip(p[1:], r.prompt_logprobs[1:], strict=True)],
            "token_ids": list(r.outputs[0].token_ids),
        }
        for p, r in zip(ps, res, strict=True)
    ]


runs = {"batch1": gen(prompts), "batch2": gen(prompts), "batch3": gen(prompts)}
runs["single"] = [gen([p])[0] for p in prompts]
ref = {"outputs": runs["batch1"]}
for name, outs in runs.items():
    c = real.compare(ref, {"outputs": outs})
    print(
        variant, name, "max", c["max_abs_logprob_diff"], "tokens_identical", c["tokens_identical"],
        "first", c["first_differing_token"], flush=True,
    )  # fmt: skip
cross = json.loads((work / variant / "pp1-a.json").read_text())
c = real.compare(cross, {"outputs": runs["batch1"]})
print(variant, "vs pp1-a (other process)", c["max_abs_logprob_diff"], c["tokens_identical"], c["first_differing_token"])
