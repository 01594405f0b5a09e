"""The drafting shape, once: what a speculative step drafts, checked, and in every engine's names.

`Drafting(steps, topk, num_draft_tokens)` uses SGLang's three settings, the root counted:

- `steps`: the drafting depth (`--speculative-num-steps`); for a chain, the K drafted tokens;
- `topk`: children per expanded node (`--speculative-eagle-topk`; 1: a chain);
- `num_draft_tokens`: tokens the target verifies per step, the root (the last verified token)
  included (`--speculative-num-draft-tokens`); a chain verifies steps + 1.

A chain of K drafted tokens is `Drafting(K)` (= `Drafting.chain(K)`), vLLM's
`num_speculative_tokens = K`. The conversions to each engine's names live here and nowhere else:
`sglang()`, `vllm()` and `eagle()` (the EAGLE reference code's `depth = steps - 1`, `top_k`,
`total_token = num_draft_tokens`: its first drafting step runs before the depth loop), and
`from_flags` reads the kit's CLI / JSON names (`--steps`, `--topk`, `--draft-tokens`).

`--draft-tokens` is SGLang's `num_draft_tokens` (root counted) whenever `--steps` or `--topk` is
given. Alone, it keeps each command's older meaning: `simulate`, `rate-for` and `speculate` read
it as a chain of K drafted tokens (`lone="drafted"`); `metrics` and `report`, whose flags always
followed SGLang, as num_draft_tokens (`lone="sglang"`, a chain of K - 1).

`check()` is the one check every command runs on drafting settings: the shapes SGLang accepts
(steps >= 1, topk >= 1, at least one drafted token; with topk 1, num_draft_tokens = steps + 1,
since SGLang's `server_args.py` resets it to that; at most the candidates its tree search keeps:
topk at the first depth and topk x topk at each later one, so steps 5 topk 4 verifies at most
1 + 4 + 4 x 16 = 69 tokens); vLLM drafts chains only. A problem is one `ValueError` line naming
the flag. `simulation()` is the `simulate` command's result. Numpy only, no torch.
"""
from __future__ import annotations

from dataclasses import dataclass

from helpers.acceptance.chain import chain_expected, rate_for_accept_length, simulate_chain
from helpers.acceptance.montecarlo import SimResult
from helpers.acceptance.tree import build_tree, simulate_tree, tree_expected

FLAGS = {"steps": "--steps", "topk": "--topk", "num_draft_tokens": "--draft-tokens"}


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
            if v is not None and (isinstance(v, bool) or int(v) != v):
                raise ValueError(f"{FLAGS[name]} {v!r}: not a whole number")
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
    def from_eagle(cls, depth: int, top_k: int, total_token: int) -> Drafting:
        """From the EAGLE reference code's `depth`, `top_k`, `total_token`."""
        return cls(int(depth) + 1, int(top_k), int(total_token)).check()

    @classmethod
    def from_flags(cls, steps=None, topk=None, draft_tokens=None, *, lone: str = "drafted",
                   positions: int | None = None) -> Drafting | None:
        """The kit's CLI / JSON names -> a checked `Drafting`, or None when nothing says the shape.

        `draft_tokens` is SGLang's num_draft_tokens when `steps` or `topk` is given; alone it is
        K drafted tokens (`lone="drafted"`) or num_draft_tokens (`lone="sglang"`). With nothing
        given, a chain as long as the `positions` a source reports (None when it reports none).
        ValueError (one line, naming the flag) on a shape no engine runs.
        """
        if lone not in ("drafted", "sglang"):
            raise ValueError(f"lone must be 'drafted' or 'sglang', got {lone!r}")
        for name, v in (("steps", steps), ("topk", topk), ("num_draft_tokens", draft_tokens)):
            if v is not None and (isinstance(v, bool) or not float(v).is_integer()):
                raise ValueError(f"{FLAGS[name]} {v!r}: not a whole number")
        if steps is None and topk is None:
            if draft_tokens is None:
                return None if not positions else cls(int(positions)).check()
            n = int(draft_tokens)
            if lone == "drafted":
                if n < 1:
                    raise ValueError(f"--draft-tokens {n}: a chain needs at least 1 drafted token")
                return cls(n).check()
            if n < 2:
                raise ValueError(f"--draft-tokens {n}: SGLang's num-draft-tokens counts the root, so it must be "
                                 "at least 2 (the root and one drafted token)")
            return cls(n - 1).check()
        if steps is None:
            if int(topk) > 1:
                raise ValueError(f"--topk {topk}: a tree also needs --steps (SGLang --speculative-num-steps)")
            if topk is not None and int(topk) < 1:
                raise ValueError(f"--topk {topk}: must be at least 1 (1: a chain)")
            if draft_tokens is None:
                raise ValueError("--topk 1 alone gives no chain length: add --steps K (or --draft-tokens)")
            return cls.from_flags(None, None, draft_tokens, lone=lone)
        k = 1 if topk is None else int(topk)
        if k > 1 and draft_tokens is None:
            raise ValueError(f"--topk {k}: a tree needs --draft-tokens (SGLang --speculative-num-draft-tokens, "
                             "root counted)")
        return cls(int(steps), k, None if draft_tokens is None else int(draft_tokens)).check()

    @staticmethod
    def check_flags(steps=None, topk=None, draft_tokens=None, *, lone: str = "sglang") -> None:
        """Each given flag on its own (before a source fills the others): ValueError naming it."""
        for name, v in (("steps", steps), ("topk", topk), ("num_draft_tokens", draft_tokens)):
            if v is not None and (isinstance(v, bool) or not float(v).is_integer()):
                raise ValueError(f"{FLAGS[name]} {v!r}: not a whole number")
        if steps is not None and int(steps) < 1:
            raise ValueError(f"--steps {steps}: the drafting depth must be at least 1 (SGLang --speculative-num-steps)")
        if topk is not None and int(topk) < 1:
            raise ValueError(f"--topk {topk}: must be at least 1 (1: a chain)")
        least = 1 if lone == "drafted" and steps is None and topk is None else 2
        if draft_tokens is not None and int(draft_tokens) < least:
            raise ValueError(f"--draft-tokens {draft_tokens}: " + (
                "a chain needs at least 1 drafted token" if least == 1 else
                "SGLang's num-draft-tokens counts the root, so it must be at least 2 (the root and one drafted token)"))

    # -- the one check ------------------------------------------------------------------------------
    def check(self, engine: str | None = None) -> Drafting:
        """Refuse a shape SGLang (or vLLM, with `engine="vllm"`) does not run: ValueError, one line."""
        s, k, n = self.steps, self.topk, self.num_draft_tokens
        if s < 1:
            raise ValueError(f"--steps {s}: the drafting depth must be at least 1 (SGLang --speculative-num-steps)")
        if k < 1:
            raise ValueError(f"--topk {k}: must be at least 1 (1: a chain)")
        if n is None:
            raise ValueError(f"--topk {k}: a tree needs --draft-tokens (SGLang --speculative-num-draft-tokens)")
        if n < 2:
            raise ValueError(f"--draft-tokens {n}: SGLang's num-draft-tokens counts the root, so it must be at "
                             "least 2 (the root and one drafted token)")
        if k == 1 and n != s + 1:
            raise ValueError(f"--draft-tokens {n}: with --topk 1 a {s}-step chain verifies {s + 1} tokens with the "
                             f"root (SGLang sets --speculative-num-draft-tokens to steps + 1 when topk is 1); "
                             f"give --draft-tokens {s + 1} or leave it out")
        most = tree_candidates(s, k) + 1
        if n > most:
            raise ValueError(f"--draft-tokens {n}: a tree of --steps {s} --topk {k} holds at most {most} tokens with "
                             f"the root ({k} + {s - 1} x {k * k} drafted candidates), SGLang cannot pick more")
        if engine == "vllm" and k > 1:
            raise ValueError(f"--topk {k}: vLLM drafts a chain (num_speculative_tokens); a tree is SGLang's")
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

    def eagle(self) -> dict:
        """The EAGLE reference code's names: its first drafting step runs before `depth` more."""
        return {"depth": self.steps - 1, "top_k": self.topk, "total_token": self.num_draft_tokens}

    def to_dict(self) -> dict:
        return {"drafting": "chain" if self.is_chain else "tree", "steps": self.steps, "topk": self.topk,
                "num_draft_tokens": self.num_draft_tokens, "label": self.label}

    # -- accept length ------------------------------------------------------------------------------
    def expected(self, accept_rate) -> float:
        """Exact expected accept length (bonus token counted) at per-token (or per-position) rates."""
        if self.is_chain:
            return chain_expected(accept_rate, self.steps)
        return tree_expected(accept_rate, self.steps, self.topk, self.num_draft_tokens)

    def simulate(self, accept_rate, trials: int = 100_000, seed: int | None = 0) -> SimResult:
        if self.is_chain:
            return simulate_chain(accept_rate, self.steps, trials=trials, seed=seed)
        return simulate_tree(accept_rate, self.steps, self.topk, self.num_draft_tokens, trials=trials, seed=seed)

    def rate_for(self, accept_length: float) -> float:
        """The single per-token acceptance whose exact expectation here is `accept_length`."""
        if self.is_chain:
            return rate_for_accept_length(accept_length, self.steps)
        return rate_for_accept_length(accept_length, self.num_draft_tokens, self.topk, self.steps)

    def sglang_accept_rate(self, accept_length: float) -> dict:
        """What SGLang's log prints as `accept rate` for this accept length, under its two definitions."""
        n = self.num_draft_tokens
        return {"length/N": accept_length / n, "(length-1)/(N-1)": (accept_length - 1) / (n - 1) if n > 1 else None}


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
    )
