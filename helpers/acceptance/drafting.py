"""The drafting shape, once: what a speculative step drafts, checked, and in every engine's names.

`Drafting(steps, topk, num_draft_tokens)` uses SGLang's three settings, the root counted:

- `steps`: the drafting depth (`--speculative-num-steps`); for a chain, the K drafted tokens;
- `topk`: children per expanded node (`--speculative-eagle-topk`; 1: a chain);
- `num_draft_tokens`: tokens the target verifies per step, the root (the last verified token)
  included (`--speculative-num-draft-tokens`); a chain verifies steps + 1.

A chain of K drafted tokens is `Drafting(K)` (= `Drafting.chain(K)`), vLLM's
`num_speculative_tokens = K`. The conversions to each engine's names live here and nowhere else:
`sglang()`, `vllm()`, `engine_flags()` (both, as the JSON states a shape) and `eagle()` (the EAGLE
reference code's `depth = steps - 1`, `top_k`, `total_token = num_draft_tokens`: its first
drafting step runs before the depth loop).

`read_flags` / `from_flags` read every command's shape flags, once, each with one meaning: the
engines' own (`--num-speculative-tokens K`: vLLM's chain of K; `--speculative-num-steps`,
`--speculative-eagle-topk`, `--speculative-num-draft-tokens`: SGLang's, the root counted) and the
kit's older aliases `--steps`, `--topk`, `--draft-tokens` (= SGLang's three, `--draft-tokens`
counting the root). Two flags naming one setting with different values, or vLLM's K beside an
SGLang shape it is not, are refused in one line. `--draft-tokens` with no other shape flag is the
one spelling that meant two things (a chain of K drafted tokens in `simulate`, `rate-for`,
`speculate`, `reproduce`; SGLang's count, a chain of K - 1, in `metrics` and `report`): it keeps
the first meaning where it had it (`lone="drafted"`) and is refused with one line naming the
explicit flags where it had the second (`lone="refuse"`); `lone="sglang"` is the Python API's
(`RunSettings`, log settings) SGLang reading.

`check()` is the one check every command runs on drafting settings: the shapes SGLang accepts
(steps >= 1, topk >= 1, at least one drafted token; with topk 1, num_draft_tokens = steps + 1,
since SGLang's `server_args.py` resets it to that; at most the candidates its tree search keeps:
topk at the first depth and topk x topk at each later one, so steps 5 topk 4 verifies at most
1 + 4 + 4 x 16 = 69 tokens); vLLM drafts chains only. A problem is one `ValueError` line naming
the flag. `simulation()` is the `simulate` command's result. Numpy only, no torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from helpers.acceptance.montecarlo import SimResult

# The chain and tree maths (numpy) are imported where a shape is computed with, not where it is read:
# every command reads a shape, and the light ones (--help, throughput, logs) stay free of numpy.

FLAGS = {"steps": "--steps", "topk": "--topk", "num_draft_tokens": "--draft-tokens"}
# SGLang's server-argument names -> the kit's (CLI flags and JSON fields without the dashes)
SGLANG_NAMES = {"speculative_num_steps": "steps", "speculative_eagle_topk": "topk",
                "speculative_num_draft_tokens": "draft_tokens"}
ALIASES = {"steps": "--steps", "topk": "--topk", "draft_tokens": "--draft-tokens"}  # the kit's older spellings
SGLANG_FLAGS = {kit: "--" + name.replace("_", "-") for name, kit in SGLANG_NAMES.items()}
VLLM_FLAG = "--num-speculative-tokens"
LONE = ("drafted", "sglang", "refuse")


def _whole(flag: str, v) -> None:
    if v is not None and (isinstance(v, bool) or not float(v).is_integer()):
        raise ValueError(f"{flag} {v!r}: not a whole number")


def _low(flag: str, v) -> str | None:
    """The one message for a value below what its setting allows (None: it is not)."""
    v = int(v)
    if flag in ("--steps", "--speculative-num-steps") and v < 1:
        return f"{flag} {v}: the drafting depth must be at least 1 (SGLang --speculative-num-steps)"
    if flag in ("--topk", "--speculative-eagle-topk") and v < 1:
        return f"{flag} {v}: must be at least 1 (1: a chain)"
    if flag in ("--draft-tokens", "--speculative-num-draft-tokens") and v < 2:
        return (f"{flag} {v}: SGLang's num-draft-tokens counts the root, so it must be at least 2 (the root "
                "and one drafted token)")
    if flag in ("--num-speculative-tokens", "chain") and v < 1:
        return f"{'--draft-tokens' if flag == 'chain' else flag} {v}: a chain needs at least 1 drafted token"
    return None


def _tree_needs_n(topk: int) -> str:
    return f"--topk {topk}: a tree needs --draft-tokens (SGLang --speculative-num-draft-tokens, root counted)"


def _refuse_low(flag: str, v) -> None:
    if v is not None and (why := _low(flag, v)):
        raise ValueError(why)


def tree_candidates(steps: int, topk: int) -> int:
    """Drafted nodes SGLang's tree search creates: topk at depth 1, then topk x topk per depth
    (the topk best nodes of a depth are expanded). num_draft_tokens - 1 of them are verified."""
    return int(topk) + (int(steps) - 1) * int(topk) ** 2


@dataclass(frozen=True)
class Drafting:
    """SGLang's steps / topk / num_draft_tokens (root counted); `Drafting(K)` is a chain of K."""

    steps: int
    topk: int = 1
    num_draft_tokens: int | None = None  # None: steps + 1 (a chain)

    def __post_init__(self):
        for name in ("steps", "topk", "num_draft_tokens"):
            v = getattr(self, name)
            _whole(FLAGS[name], v)
            if v is not None:
                object.__setattr__(self, name, int(v))
        if self.num_draft_tokens is None:
            object.__setattr__(self, "num_draft_tokens", self.steps + 1 if self.topk == 1 else None)

    # -- constructors -----------------------------------------------------------------------------
    @classmethod
    def chain(cls, k: int) -> Drafting:
        """A chain of k drafted tokens (vLLM's num_speculative_tokens = k)."""
        return cls(int(k)).check()

    @classmethod
    def tree(cls, steps: int, topk: int, num_draft_tokens: int) -> Drafting:
        return cls(int(steps), int(topk), int(num_draft_tokens)).check()

    @classmethod
    def from_sglang(cls, args: dict) -> Drafting:
        """From SGLang's server arguments (`speculative_num_steps`, ...)."""
        return cls(args["speculative_num_steps"], args.get("speculative_eagle_topk") or 1,
                   args.get("speculative_num_draft_tokens")).check()

    @classmethod
    def from_vllm(cls, num_speculative_tokens: int) -> Drafting:
        """vLLM's `num_speculative_tokens = K`: a chain of K."""
        return cls.chain(num_speculative_tokens)

    @classmethod
    def from_eagle(cls, depth: int, top_k: int, total_token: int) -> Drafting:
        """From the EAGLE reference code's `depth`, `top_k`, `total_token`."""
        return cls(int(depth) + 1, int(top_k), int(total_token)).check()

    @staticmethod
    def read_flags(steps=None, topk=None, draft_tokens=None, *, num_speculative_tokens=None,
                   speculative_num_steps=None, speculative_eagle_topk=None, speculative_num_draft_tokens=None,
                   lone: str = "drafted") -> dict:
        """Every spelling of the shape -> {steps, topk, draft_tokens} in SGLang's terms (None: not
        given; draft_tokens counts the root). One meaning per flag (see the module docstring);
        ValueError, one line naming the flags, on two that disagree or a lone `--draft-tokens`
        where `lone="refuse"`."""
        if lone not in LONE:
            raise ValueError(f"lone must be one of {', '.join(LONE)}, got {lone!r}")
        old = {"steps": steps, "topk": topk, "draft_tokens": draft_tokens}
        new = {"steps": speculative_num_steps, "topk": speculative_eagle_topk,
               "draft_tokens": speculative_num_draft_tokens}
        for name in old:
            _whole(ALIASES[name], old[name])
            _whole(SGLANG_FLAGS[name], new[name])
        _whole(VLLM_FLAG, num_speculative_tokens)
        out = {}
        for name in old:
            a, b = old[name], new[name]
            if a is not None and b is not None and int(a) != int(b):
                raise ValueError(f"{ALIASES[name]} {a} and {SGLANG_FLAGS[name]} {b} name the same setting with two "
                                 "values: give one")
            out[name] = None if a is None and b is None else int(b if b is not None else a)
        given = {name: (SGLANG_FLAGS[name] if new[name] is not None else ALIASES[name])
                 for name in out if out[name] is not None}
        k = num_speculative_tokens
        if k is not None:
            _refuse_low(VLLM_FLAG, k)
            chain = {"steps": int(k), "topk": 1, "draft_tokens": int(k) + 1}
            for name, flag in given.items():
                if out[name] != chain[name]:
                    raise ValueError(f"{VLLM_FLAG} {k} and {flag} {out[name]} disagree: vLLM's num_speculative_tokens "
                                     f"{k} is a chain of {k} (SGLang --speculative-num-steps {k} "
                                     f"--speculative-eagle-topk 1 --speculative-num-draft-tokens {int(k) + 1}); "
                                     "give one shape")
            return {"steps": int(k), "topk": 1, "draft_tokens": out["draft_tokens"]}
        if out["steps"] is None and out["topk"] is None and out["draft_tokens"] is not None:
            n, flag = out["draft_tokens"], given["draft_tokens"]
            if flag == SGLANG_FLAGS["draft_tokens"] or lone == "refuse":
                raise ValueError(f"{flag} {n} alone gives no depth: a vLLM chain of K is {VLLM_FLAG} K; SGLang's "
                                 "shape is --speculative-num-steps S [--speculative-eagle-topk T "
                                 "--speculative-num-draft-tokens N], N counting the root")
            if lone == "drafted":  # the older meaning of these commands: K drafted tokens
                _refuse_low("chain", n)
                return {"steps": n, "topk": None, "draft_tokens": None}
            _refuse_low(flag, n)  # the root counted (the Python API's third meaning)
            return {"steps": n - 1, "topk": None, "draft_tokens": None}
        return out

    @classmethod
    def from_flags(cls, steps=None, topk=None, draft_tokens=None, *, lone: str = "drafted",
                   positions: int | None = None, **engine_flags) -> Drafting | None:
        """The shape flags (the kit's aliases positionally, the engines' own by keyword:
        `num_speculative_tokens`, `speculative_num_steps`, ...) -> a checked `Drafting`, or None when
        nothing says the shape. With nothing given, a chain as long as the `positions` a source
        reports (None when it reports none). ValueError (one line, naming the flag) on a shape no
        engine runs or flags that disagree."""
        f = cls.read_flags(steps, topk, draft_tokens, lone=lone, **engine_flags)
        steps, topk, draft_tokens = f["steps"], f["topk"], f["draft_tokens"]
        if steps is None and topk is None:
            return None if not positions else cls(int(positions)).check()
        cls.check_flags(steps, topk, draft_tokens)
        if steps is None:
            if topk > 1:
                raise ValueError(f"--topk {topk}: a tree also needs --steps (SGLang --speculative-num-steps)")
            if draft_tokens is None:
                raise ValueError(f"--topk 1 alone gives no chain length: add {VLLM_FLAG} K (or --steps K)")
            return cls(draft_tokens - 1).check()  # topk 1 and SGLang's count: a chain of N - 1
        k = 1 if topk is None else topk
        if k > 1 and draft_tokens is None:
            raise ValueError(_tree_needs_n(k))
        return cls(steps, k, draft_tokens).check()

    @staticmethod
    def check_flags(steps=None, topk=None, draft_tokens=None, *, lone: str = "sglang") -> None:
        """Each given flag on its own (before a source fills the others): ValueError naming it."""
        for flag, v in (("--steps", steps), ("--topk", topk), ("--draft-tokens", draft_tokens)):
            _whole(flag, v)
        least = "chain" if lone == "drafted" and steps is None and topk is None else "--draft-tokens"
        for flag, v in (("--steps", steps), ("--topk", topk), (least, draft_tokens)):
            _refuse_low(flag, v)

    # -- the one check ------------------------------------------------------------------------------
    def check(self, engine: str | None = None) -> Drafting:
        """Refuse a shape SGLang does not run, or a tree for an `engine` whose table says it drafts
        chains only (rule `draft.tree`): ValueError, one line."""
        s, k, n = self.steps, self.topk, self.num_draft_tokens
        _refuse_low("--steps", s)
        _refuse_low("--topk", k)
        if n is None:
            raise ValueError(_tree_needs_n(k))
        _refuse_low("--draft-tokens", n)
        if k == 1 and n != s + 1:
            raise ValueError(f"--draft-tokens {n}: with --topk 1 a {s}-step chain verifies {s + 1} tokens with the "
                             f"root (SGLang's num-draft-tokens counts the root and is steps + 1 when topk is 1); "
                             f"give --draft-tokens {s + 1} or leave it out; vLLM's "
                             f"num_speculative_tokens {n} is {VLLM_FLAG} {n}")
        most = tree_candidates(s, k) + 1
        if n > most:
            raise ValueError(f"--draft-tokens {n}: a tree of --steps {s} --topk {k} holds at most {most} tokens with "
                             f"the root ({k} + {s - 1} x {k * k} drafted candidates), SGLang cannot pick more")
        if engine is not None and k > 1:
            from helpers.engines.registry import engine_at  # the engine table: read only when an engine is named

            if engine_at(engine).value("draft.tree") == "absent":
                raise ValueError(f"--topk {k}: {engine_at(engine).name} drafts a chain (num_speculative_tokens); "
                                 "a tree is SGLang's")
        return self

    # -- what it is ---------------------------------------------------------------------------------
    @property
    def is_chain(self) -> bool:
        return self.topk == 1

    @property
    def drafted(self) -> int:
        """Drafted tokens verified per step (the root not counted)."""
        return int(self.num_draft_tokens) - 1

    @property
    def label(self) -> str:
        if self.is_chain:
            return f"chain, {self.steps} tokens"
        return f"tree {self.steps}/{self.topk}/{self.num_draft_tokens} (steps/topk/draft tokens)"

    # -- each engine's names -----------------------------------------------------------------------
    def sglang(self) -> dict:
        return {"speculative_num_steps": self.steps, "speculative_eagle_topk": self.topk,
                "speculative_num_draft_tokens": self.num_draft_tokens}

    def vllm(self) -> dict:
        """vLLM's speculative_config: a chain only (ValueError for a tree)."""
        self.check("vllm")
        return {"num_speculative_tokens": self.steps}

    def engine_flags(self) -> dict:
        """The shape in both engines' terms, as every JSON states it: SGLang's three settings, and
        vLLM's num_speculative_tokens (None for a tree: vLLM drafts chains)."""
        return {"sglang": self.sglang(), "vllm": self.vllm() if self.is_chain else None}

    def launch_flags(self) -> str:
        """The shape as the engines' launch flags, to copy into a command line."""
        out = (f"SGLang --speculative-num-steps {self.steps} --speculative-eagle-topk {self.topk} "
               f"--speculative-num-draft-tokens {self.num_draft_tokens}")
        return out + (f"; vLLM num_speculative_tokens {self.steps}" if self.is_chain else "")

    def eagle(self) -> dict:
        """The EAGLE reference code's names: its first drafting step runs before `depth` more."""
        return {"depth": self.steps - 1, "top_k": self.topk, "total_token": self.num_draft_tokens}

    def kit(self) -> dict:
        """The kit's names: steps, topk, draft_tokens (SGLang's count, root included)."""
        return {"steps": self.steps, "topk": self.topk, "draft_tokens": self.num_draft_tokens}

    def to_dict(self) -> dict:
        return {"drafting": "chain" if self.is_chain else "tree", "steps": self.steps, "topk": self.topk,
                "num_draft_tokens": self.num_draft_tokens, "label": self.label}

    # -- accept length ------------------------------------------------------------------------------
    def expected(self, accept_rate) -> float:
        """Exact expected accept length (bonus token counted) at per-token (or per-position) rates."""
        from helpers.acceptance.chain import chain_expected
        from helpers.acceptance.tree import tree_expected

        if self.is_chain:
            return chain_expected(accept_rate, self.steps)
        return tree_expected(accept_rate, self.steps, self.topk, self.num_draft_tokens)

    def simulate(self, accept_rate, trials: int = 100_000, seed: int | None = 0) -> SimResult:
        from helpers.acceptance.chain import simulate_chain
        from helpers.acceptance.tree import simulate_tree

        if self.is_chain:
            return simulate_chain(accept_rate, self.steps, trials=trials, seed=seed)
        return simulate_tree(accept_rate, self.steps, self.topk, self.num_draft_tokens, trials=trials, seed=seed)

    def rate_for(self, accept_length: float) -> float:
        """The single per-token acceptance whose exact expectation here is `accept_length`."""
        from helpers.acceptance.chain import rate_for_accept_length

        if self.is_chain:
            return rate_for_accept_length(accept_length, self.steps)
        return rate_for_accept_length(accept_length, self.num_draft_tokens, self.topk, self.steps)

    def sglang_accept_rate(self, accept_length: float) -> dict:
        """What SGLang's log prints as `accept rate` for this accept length, under its two definitions."""
        n = self.num_draft_tokens
        return {"length/N": accept_length / n, "(length-1)/(N-1)": (accept_length - 1) / (n - 1) if n > 1 else None}


DEFAULT_DRAFTING = Drafting(5)  # the kit's one default shape (speculate, the report, the dashboard): a chain of 5


def fill(given: dict, stated: dict) -> tuple[dict, dict]:
    """Merge drafting settings named steps / topk / draft_tokens: `given` (flags) win, `stated` (a
    log's start-up line, a server's info) fill the rest. A chain's num_draft_tokens is steps + 1
    unless a flag gave it, so `--topk 1 --steps 2` on a 5/4/16 log is a 2-token chain, not 2/1/16.
    Returns (values, origin) with origin "given" or "stated" per name."""
    values, origin = {}, {}
    for name in ("steps", "topk", "draft_tokens"):
        if given.get(name) is not None:
            values[name], origin[name] = given[name], "given"
        elif stated.get(name) is not None:
            values[name], origin[name] = stated[name], "stated"
    if values.get("topk", 1) == 1 and origin.get("draft_tokens") == "stated" and "given" in origin.values():
        del values["draft_tokens"], origin["draft_tokens"]
    return values, origin


# what a figure modelled from a per-token rate was measured at: whatever the rate was (every JSON that states an
# accept length states its temperature and acceptance rule; here they are the rate's own, unknown to the model)
RATE_SAMPLING = {"temperature": None, "acceptance_rule": None,
                 "sampling_note": "a model of the per-token rate given: the rate's own temperature and acceptance rule"}


class Simulation(dict):
    """The `simulate --json` object: exact and Monte Carlo accept length for one setup; `report()`
    is the command's text."""

    def report(self) -> str:
        r = self
        how = ("chain, %d drafted tokens" % r["draft_tokens"]) if r["mode"] == "chain" else (
            f"tree, steps {r['steps']}, topk {r['topk']}, {r['draft_tokens']} draft tokens "
            f"({r['tree_nodes']} drafted nodes, per depth {r['nodes_per_depth']})")
        exact = "closed form" if r["mode"] == "chain" else "exact"
        return "\n".join([
            f"accept rate {r['accept_rate']}, {how}",
            f"  expected accept length: {r['expected_accept_length']:.4f}   ({exact})",
            f"  Monte Carlo:            {r['monte_carlo_mean']:.4f} ± {r['monte_carlo_stderr']:.4f} "
            f"(1 s.e., {r['trials']:,} trials, z = {r['z']:+.2f})",
            "  distribution: " + ", ".join(f"{k}: {v:.3f}" for k, v in r["distribution"].items() if v > 0),
        ] + ([] if "sglang_accept_rate" not in r else [
            f"  SGLang's log would print accept rate {r['sglang_accept_rate']['length/N']:.3f} (accept length / "
            f"num_draft_tokens) or {r['sglang_accept_rate']['(length-1)/(N-1)']:.3f} (accepted drafts / "
            "(num_draft_tokens - 1)), by build: not a per-token rate. A measured accept length back to a "
            "per-token rate: d2t-lab rate-for.",
        ]))


def simulation(accept_rate, drafting: Drafting, trials: int = 100_000, tree_form: bool | None = None) -> Simulation:
    """Expected accept length of one drafting shape, exactly and by Monte Carlo.

    `tree_form`: report it as SGLang's tree (tree_nodes, nodes per depth; `draft_tokens` = its
    num_draft_tokens) or as a chain (`draft_tokens` = K drafted); default: as its shape is.
    """
    from helpers.acceptance.chain import chain_expected, simulate_chain
    from helpers.acceptance.tree import build_tree, simulate_tree

    if trials < 2:
        raise ValueError("--trials must be at least 2")
    d = drafting.check()
    tree_form = (not d.is_chain) if tree_form is None else bool(tree_form)
    extra = {}
    if tree_form:
        t = build_tree(accept_rate, d.steps, d.topk, d.num_draft_tokens)
        mc = simulate_tree(accept_rate, d.steps, d.topk, d.num_draft_tokens, trials=trials)
        exact, kind, shown = t.expected(), "tree", d.num_draft_tokens
        extra = {"tree_nodes": t.nodes, "tree_depth": int(t.depth.max()),
                 "nodes_per_depth": [int((t.depth == k).sum()) for k in range(1, d.steps + 1)]}
    else:
        exact, kind, shown = chain_expected(accept_rate, d.steps), "chain", d.steps
        mc = simulate_chain(accept_rate, d.steps, trials=trials)
    extra["sglang_accept_rate"] = d.sglang_accept_rate(exact)
    return Simulation(
        mode=kind, accept_rate=accept_rate, draft_tokens=shown, topk=d.topk if tree_form else None,
        steps=d.steps if tree_form else None, expected_accept_length=exact, monte_carlo_mean=mc.mean,
        monte_carlo_stderr=mc.stderr, trials=mc.trials, z=mc.z,
        distribution={str(k): v for k, v in mc.to_dict()["distribution"].items()}, drafting=d.label, **extra,
        **d.engine_flags(), **RATE_SAMPLING,
    )
