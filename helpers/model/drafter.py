"""The draft side of engine-free speculative decoding: an EAGLE-3 draft that keeps its own KV
cache across verify steps and proposes a chain or an SGLang-style tree.

`Drafter.extend(aux, next_ids)` runs the draft's step 0 over the positions the target has just
verified (their aux hidden states, captured during the verify forward, and the token after each),
appending their keys/values to the draft's cache: the "draft extend" both SGLang and vLLM run
after every verification. Nothing already in the cache is recomputed.

`Drafter.propose(steps, topk, draft_tokens, ...)` then drafts from the last verified position:

- depth 1: the `topk` most probable draft tokens of step 0's output;
- depth d + 1: the `topk` beam nodes of depth d (best cumulative draft probability) are fed
  (their token's embedding, their parent's output state, RoPE position n - 1 + d), each query
  seeing the context's step-0 keys (anchored at n - 1: `helpers.model.layer.context_allowed`,
  the one sliding-window rule) and the keys of its own ancestors; each gives `topk` children;
- kept: the `draft_tokens - 1` candidates of highest cumulative probability (SGLang's
  `--speculative-num-draft-tokens` counts the root), which is always a tree.

With topk 1 and draft_tokens = steps + 1 this is a chain. How a chain picks under sampling is the
engine's acceptance rule (`helpers.engines.acceptance_rules`): vLLM's default, SGLang and llama.cpp's
EAGLE-3 drafter take the draft's argmax whatever the temperature (`sample=False`: q is then a
point mass on the drafted token, which `Proposal.q` leaves unstated); the textbook rule, vLLM's
`draft_sample_method="probabilistic"` and SGLang's rejection sampling draw each depth's token from
softmax(draft logits / temperature) (`sample=True`, a chain only), llama.cpp's draft-simple from
the softmax over the top `draft_top_k` (10) logits / temperature, and that distribution is kept
in `Proposal.q` for the rejection rule.

Draft ids become target ids through `d2t` under a reading (`helpers.io.mapping.to_target_ids`); an id
outside the target vocab (a misread table) is kept as -1 for verification (never accepted) and
fed to the draft clamped into range, as `Eagle3Draft.draft_steps` does.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from helpers.io.mapping import to_target_ids
from helpers.model.draft import pick_tokens
from helpers.model.layer import DraftKV


@dataclass
class Proposal:
    """A kept draft tree; node 0 is the root (the last verified token, not drafted).

    Nodes 1.. are in creation order (parents before children). `q[i]` (sampling only) is the
    draft distribution node i was drawn from, over draft ids.
    """

    tokens: list[int]  # target id per node (-1: outside the target vocab); tokens[0] = root
    parent: list[int]
    depth: list[int]
    draft_ids: list[int]
    q: dict = field(default_factory=dict)  # node -> [draft_vocab] probabilities (sampled chain)

    @property
    def size(self) -> int:
        return len(self.tokens)

    def children(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.tokens]
        for i in range(1, len(self.tokens)):
            out[self.parent[i]].append(i)
        return out


class Drafter:
    """An `Eagle3Draft` with a step-0 KV cache over the verified positions of one sequence.

    Every forward is `Eagle3Draft.step` (the layer and head `draft_steps` uses): the drafter only
    chooses what to feed and keeps the cache (`helpers.model.layer.DraftKV`).
    """

    def __init__(self, model, reading: str = "offset"):
        self.model, self.reading = model, reading
        self.vocab = model.config.vocab_size
        # draft id -> target id under the reading, read once; without d2t the draft id is the target id
        d2t = model.d2t
        n = d2t.numel() if d2t is not None else max(model.config.draft_vocab_size, self.vocab)
        ids = to_target_ids(torch.arange(n, device=model.fc.weight.device), d2t, reading if d2t is not None else "none")
        self._target_of = torch.where((ids >= 0) & (ids < self.vocab), ids, torch.full_like(ids, -1))
        self.dtype = model.fc.weight.dtype
        self.device = model.fc.weight.device
        self.kv = DraftKV()  # context keys/values [1, heads, n, d]
        self.h_last = None  # [1, 1, H]: step 0's output at the last verified position
        self.logits_last = None  # [draft_vocab] float
        self.forwards = 0
        self.seconds = 0.0

    @property
    def length(self) -> int:
        return self.kv.length

    def target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Draft ids -> target ids under the reading; -1 where that lands outside the target vocab."""
        return self._target_of[draft_ids.to(self._target_of.device)].to(draft_ids.device)

    def _step(self, h, emb, positions, anchor=None):
        t0 = time.perf_counter()
        h, logits = self.model.step(h, emb, positions, self.kv, anchor)
        self.forwards += 1
        self.seconds += time.perf_counter() - t0  # model time only: what the loop around it costs is overhead
        return h, logits

    @torch.inference_mode()
    def extend(self, aux: torch.Tensor, next_ids: torch.Tensor) -> None:
        """Step 0 over m newly verified positions: aux [1, m, 3Ht], next_ids [1, m] target ids."""
        t0 = time.perf_counter()
        n, m = self.length, int(next_ids.shape[1])
        h = self.model.project(aux.to(self.device, self.dtype))
        emb = self.model.embed_tokens(next_ids.to(self.device))
        self.seconds += time.perf_counter() - t0
        h, logits = self._step(h, emb, torch.arange(n, n + m, device=self.device))
        self.h_last, self.logits_last = h[:, -1:], logits[0, -1].float()

    @torch.inference_mode()
    def propose(self, root_token: int, steps: int, topk: int, draft_tokens: int, *, sample: bool = False,
                temperature: float = 1.0, generator=None, draft_top_k: int | None = None) -> Proposal:
        """Draft a tree (see the module docstring) after the root token `root_token`; `draft_top_k`
        (with `sample`): draw from the softmax over the top k logits only (llama.cpp's draft-simple q)."""
        n = self.length

        def pick(logits):
            if sample and draft_top_k and 0 < draft_top_k < logits.shape[-1]:
                kth = logits.topk(draft_top_k, dim=-1).values[..., -1:]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            return pick_tokens(logits, topk, sample, temperature, generator)

        ids, lp, probs = pick(self.logits_last[None])
        # candidates: cumulative log-prob, parent candidate (0 = root), depth, draft id
        c_score, c_parent, c_depth, c_draft = [0.0], [-1], [0], [-1]
        c_q: dict = {}
        for r, (i, s) in enumerate(zip(ids[0].tolist(), lp[0].tolist())):
            c_score.append(s), c_parent.append(0), c_depth.append(1), c_draft.append(i)
            if probs is not None:
                c_q[len(c_score) - 1] = probs[0]
        beam = list(range(1, len(c_score)))  # depth-1 candidates (topk of them) are the first beam
        beam_h = self.h_last.expand(1, len(beam), -1)  # each beam node's parent output
        self.kv.end_chain()
        for d in range(1, steps):
            m = len(beam)
            toks = self.target_ids(torch.tensor([c_draft[b] for b in beam], device=self.device))
            emb = self.model.embed_tokens(toks.clamp(0, self.vocab - 1))[None]
            # row r of the chain cache holds beam[r]'s ancestors: each query sees the context and its ancestors
            h, logits = self._step(beam_h, emb, torch.full((m,), n - 1 + d, device=self.device),
                                   anchor=torch.full((m,), n - 1, device=self.device))
            ids, lp, probs = pick(logits[0])
            base = torch.tensor([c_score[b] for b in beam], device=lp.device)
            scores = (base[:, None] + lp).flatten()
            first = len(c_score)
            for row, b in enumerate(beam):
                for i, s in zip(ids[row].tolist(), (base[row] + lp[row]).tolist()):
                    c_score.append(s), c_parent.append(b), c_depth.append(d + 1), c_draft.append(i)
                    if probs is not None:
                        c_q[len(c_score) - 1] = probs[row]
            best = scores.topk(min(topk, scores.numel())).indices.tolist()
            beam = [first + j for j in best]
            parents = [j // ids.shape[1] for j in best]
            beam_h = h[:, parents]
            self.kv.reorder(torch.tensor(parents, device=self.device))
        self.kv.end_chain()
        return self._proposal(root_token, c_score, c_parent, c_depth, c_draft, c_q, draft_tokens)

    def _proposal(self, root_token: int, c_score, c_parent, c_depth, c_draft, c_q, draft_tokens: int) -> Proposal:
        """The kept tree of one sequence's candidates (lists indexed by candidate, 0 = the root)."""
        kept = self._keep(c_score, draft_tokens)
        index = {0: 0}
        for c in kept:
            index[c] = len(index)
        draft_ids = [-1] + [c_draft[c] for c in kept]
        tokens = [int(root_token)] + self.target_ids(torch.tensor(draft_ids[1:], dtype=torch.long)).tolist()
        return Proposal(tokens, [-1] + [index[c_parent[c]] for c in kept], [0] + [c_depth[c] for c in kept],
                        draft_ids, {index[c]: c_q[c] for c in kept if c in c_q})

    @staticmethod
    def _keep(score: list[float], draft_tokens: int) -> list[int]:
        """The draft_tokens - 1 best candidates (ties: earlier first), in creation order."""
        order = sorted(range(1, len(score)), key=lambda i: (-score[i], i))
        return sorted(order[: max(int(draft_tokens) - 1, 0)])


class BatchDrafter(Drafter):
    """A `Drafter` over a batch of sequences at once, chains (`propose_chains`) and trees
    (`propose_trees`): one draft forward per step for every row, each row at its own positions.

    The step-0 cache is rectangular: [B, heads, N, d], a row's keys at the slots where its verified
    positions were appended, `kv.pos` [B, N] the position of each slot (`NO_POSITION`: a padded
    slot, seen by no query), so the attention rule is the one-sequence rule by position
    (`helpers.model.layer.attend`). `extend` appends max(m_i) slots per call; `select` keeps rows
    (finished prompts leave the batch) and drops slot columns no row uses.
    """

    def __init__(self, model, reading: str = "offset"):
        super().__init__(model, reading)
        self.kv.pos = None
        self.n = None  # [B] long: verified positions per row (its next position)

    @property
    def rows(self) -> int:
        return 0 if self.n is None else int(self.n.numel())

    @torch.inference_mode()
    def extend(self, aux: torch.Tensor, next_ids: torch.Tensor, counts=None) -> None:
        """Step 0 over each row's newly verified positions: aux [B, M, 3Ht], next_ids [B, M]; row i's
        first counts[i] columns are real (None: all M), the rest padding."""
        from helpers.model.layer import NO_POSITION

        t0 = time.perf_counter()
        B, M = int(next_ids.shape[0]), int(next_ids.shape[1])
        dev = self.device
        counts = torch.full((B,), M, device=dev) if counts is None else torch.as_tensor(counts, device=dev)
        if self.n is None:
            self.n = torch.zeros(B, dtype=torch.long, device=dev)
        j = torch.arange(M, device=dev)[None]
        positions = self.n[:, None] + j  # [B, M]
        slot_pos = torch.where(j < counts[:, None], positions, torch.full_like(positions, NO_POSITION))
        self.kv.pos = slot_pos if self.kv.pos is None else torch.cat([self.kv.pos, slot_pos], dim=1)
        h = self.model.project(aux.to(dev, self.dtype))
        emb = self.model.embed_tokens(next_ids.to(dev))
        self.seconds += time.perf_counter() - t0
        h, logits = self._step(h, emb, positions)
        last = (counts - 1).clamp_min(0)
        rows = torch.arange(B, device=dev)
        self.h_last, self.logits_last = h[rows, last][:, None], logits[rows, last].float()
        self.n = self.n + counts

    def select(self, keep: torch.Tensor) -> None:
        """Keep rows `keep` (indices), then drop trailing slot columns no kept row uses."""
        from helpers.model.layer import NO_POSITION

        keep = keep.to(self.device)
        kv = self.kv
        kv.k, kv.v, kv.pos = kv.k[keep], kv.v[keep], kv.pos[keep]
        self.h_last, self.logits_last, self.n = self.h_last[keep], self.logits_last[keep], self.n[keep]
        used = (kv.pos != NO_POSITION).any(0).nonzero()
        width = int(used.max()) + 1 if used.numel() else 0
        if width < kv.pos.shape[1]:
            kv.k, kv.v, kv.pos = kv.k[:, :, :width], kv.v[:, :, :width], kv.pos[:, :width]

    @torch.inference_mode()
    def propose_chains(self, roots: torch.Tensor, steps: int, *, sample: bool = False, temperature: float = 1.0,
                       generators=None, draft_top_k: int | None = None) -> Chains:
        """A chain of `steps` drafted tokens per row after its root (`Drafter.propose` with topk 1 and
        steps + 1 draft tokens, row by row the same picks); `roots` [B] target ids; `generators`: one
        per row (sampling)."""
        B, dev = self.rows, self.device

        def pick(logits):  # [B, V] -> ids [B], probs per row (sampled) or None
            if not sample:
                return pick_tokens(logits, 1)[0][:, 0], None  # the one-row path's own pick: same ties
            ids, probs = [], []
            for r in range(B):
                row = logits[r:r + 1]
                if draft_top_k and 0 < draft_top_k < row.shape[-1]:
                    kth = row.topk(draft_top_k, dim=-1).values[..., -1:]
                    row = row.masked_fill(row < kth, float("-inf"))
                i, _, p = pick_tokens(row, 1, True, temperature, generators[r])
                ids.append(i[0, 0]), probs.append(p[0])
            return torch.stack(ids), probs

        ids, probs = pick(self.logits_last)
        drafted, qs = [ids], [probs]
        h = self.h_last
        anchor = (self.n - 1)[:, None]
        self.kv.end_chain()
        for d in range(1, steps):
            toks = self.target_ids(ids)
            emb = self.model.embed_tokens(toks.clamp(0, self.vocab - 1))[:, None]
            h, logits = self._step(h, emb, anchor + d, anchor=anchor)
            ids, probs = pick(logits[:, 0])
            drafted.append(ids), qs.append(probs)
        self.kv.end_chain()
        draft_ids = torch.stack(drafted, dim=1)  # [B, steps]
        tokens = torch.cat([torch.as_tensor(roots, device=dev).view(B, 1), self.target_ids(draft_ids)], dim=1)
        return Chains(tokens, draft_ids, qs)


    @torch.inference_mode()
    def propose_trees(self, roots: list[int], steps: int, topk: int, draft_tokens: int) -> list[Proposal]:
        """A tree per row after its root (`Drafter.propose` with argmax picks, row by row the same
        candidates, scores and kept nodes): one draft forward per depth for every row's `topk` beam
        nodes, each row at its own positions, its beam following its own parents."""
        B, dev = self.rows, self.device
        ids, lp, _ = pick_tokens(self.logits_last, topk)  # the one-row path's argmax pick
        cands = [([0.0], [-1], [0], [-1]) for _ in range(B)]  # per row: score, parent, depth, draft id
        ids_l, lp_l = ids.tolist(), lp.tolist()
        for r in range(B):
            score, parent, depth, draft = cands[r]
            for i, s in zip(ids_l[r], lp_l[r]):
                score.append(s), parent.append(0), depth.append(1), draft.append(i)
        m = int(ids.shape[1])
        beam = torch.arange(1, m + 1, device=dev)[None].expand(B, m)  # [B, m] candidate indices per row
        beam_ids = ids  # [B, m] the beam nodes' draft ids
        beam_score = lp  # [B, m] their cumulative log-probs (float32, as the one-row path's)
        beam_h = self.h_last.expand(B, m, -1)
        anchor = (self.n - 1)[:, None].expand(B, m)
        self.kv.end_chain()
        for d in range(1, steps):
            toks = self.target_ids(beam_ids)
            emb = self.model.embed_tokens(toks.clamp(0, self.vocab - 1))
            h, logits = self._step(beam_h, emb, anchor + d, anchor=anchor)
            V = logits.shape[-1]
            ids, lp, _ = pick_tokens(logits.reshape(B * m, V), topk)
            k = int(ids.shape[1])
            lp, ids = lp.view(B, m, k), ids.view(B, m, k)
            scores = beam_score[:, :, None] + lp  # [B, m, k]
            ids_l, sc_l, beam_l = ids.tolist(), scores.tolist(), beam.tolist()
            first = len(cands[0][0])  # every row has as many candidates
            for r in range(B):
                score, parent, depth, draft = cands[r]
                for row in range(m):
                    for i, s in zip(ids_l[r][row], sc_l[r][row]):
                        score.append(s), parent.append(beam_l[r][row]), depth.append(d + 1), draft.append(i)
            flat = scores.flatten(1)  # [B, m * k]
            best = torch.stack([flat[r].topk(min(topk, flat.shape[1])).indices for r in range(B)])  # the one-row topk
            parents = best // k
            beam = first + best
            beam_ids = ids.flatten(1).gather(1, best)
            beam_score = flat.gather(1, best)
            m = int(best.shape[1])
            beam_h = h.gather(1, parents[..., None].expand(B, m, h.shape[-1]))
            self.kv.reorder(parents)
            anchor = anchor[:, :1].expand(B, m)
        self.kv.end_chain()
        return [self._proposal(int(root), *cands[r], {}, draft_tokens) for r, root in enumerate(roots)]


@dataclass
class Chains:
    """A batch of drafted chains (`BatchDrafter.propose_chains`): row r is a chain of `steps` nodes
    after its root, as tensors; `proposal(r)` is row r as the one-prompt loop's `Proposal`."""

    tokens: torch.Tensor  # [B, steps + 1] target ids (-1: outside the target vocab); column 0 the root
    draft_ids: torch.Tensor  # [B, steps]
    qs: list  # per depth: None (argmax drafts) or one draft distribution per row

    def proposal(self, r: int) -> Proposal:
        steps = int(self.draft_ids.shape[1])
        q = {d + 1: self.qs[d][r] for d in range(steps) if self.qs[d] is not None}
        return Proposal(self.tokens[r].tolist(), list(range(-1, steps)), list(range(steps + 1)),
                        [-1] + self.draft_ids[r].tolist(), q)
