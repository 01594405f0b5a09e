"""The engine-free loop over a batch of prompts at once, chains and trees: one target forward
verifies every row's chain or tree, one draft forward per drafting step drafts for every row.

The same round as `helpers.speculate.loop.speculate_prompt`, row by row the same decisions:

- the target's KV cache is rectangular ([B, heads, S, d] per layer, `transformers`' DynamicCache
  with batch B): every forward appends the same number of slots to every row (a prompt's padding,
  a chain's rejected nodes), and `slot_pos` [B, S] holds the position of the token in each slot,
  `NO_POSITION` for a slot no query may see (padding, rejected nodes: masked out for good instead
  of cut). Each forward is given per-row `position_ids` and a 4-D additive mask built from the
  slot positions by the window rule of `helpers.speculate.target_cache` (a query at position p
  sees slots at positions <= p, and > p - W in a sliding layer), one per attention type;
- the draft is a `helpers.model.drafter.BatchDrafter` (the same slots-and-positions scheme); its
  chains come as tensors (`Chains`), a row's `Proposal` built only where a per-row walk needs it;
- a tree (`BatchDrafter.propose_trees`: every row's beam at once, each following its own parents)
  is fed as [B, m] nodes at positions n_b + depth, the mask's new columns being each row's own tree
  (a node sees its ancestors and itself; `tree_inputs`; a smaller tree padded with nodes no other
  node sees); greedy verification is `verify`'s walk per row over one batched argmax
  (`greedy_walk`); each row's root and accepted path are then moved to the front of its new slots
  (`BatchTargetCache.keep_paths`, their keys already at their final positions n_b .. n_b + k, the
  rest masked) and the columns no row kept are cropped; the draft extends over the same nodes;
- greedy acceptance is `verify`'s chain walk on every row at once (tensor ops: the target's argmax,
  the kept prefix, the next token, what the draft reads next); sampled acceptance is `verify` per
  row, with that prompt's own generator (seeded as one at a time: seed * 1_000_003 + index), so a
  prompt's draws do not depend on the batch;
- a prefill computes the target's head only at the columns where rows' prompts end;
- a finished prompt leaves the batch (its cache rows dropped, then slot columns no row uses), and
  the next waiting prompts join: they are prefilled together and their cache padded into the rectangle.

Counts are the one-at-a-time counts: verify steps, histogram, per-position, engine counts, target
forwards (prefills + verify steps, per prompt), target tokens fed (real tokens, padding not
counted), draft forwards (per prompt); `SpecRun.batched_forwards` says how many batched target /
draft forwards actually ran. A tree's drafting is the draft's top-k whatever the temperature, so
sampled trees batch too: only verification draws, per row with its own generator.
"""
from __future__ import annotations

import inspect
import time

import torch

from helpers.model.drafter import BatchDrafter
from helpers.model.layer import NO_POSITION
from helpers.model.target import SLIDING_ATTENTION, HiddenStateCapture, Target, attention_layout
from helpers.speculate.result import PromptRun, SpecRun, SpecSettings
from helpers.speculate.target_cache import cache_argument


def _cache_layers(cache):
    """(keys, values) holders of every layer, as settable objects."""
    return [layer for layer in cache.layers if getattr(layer, "keys", None) is not None and layer.keys.numel()]


class BatchTargetCache:
    """The target's rectangular KV cache over a batch of sequences (see the module docstring)."""

    def __init__(self, model):
        from transformers import DynamicCache

        self.types, self.window = attention_layout(model.config)
        self.kinds = sorted(set(self.types))
        self.cache = DynamicCache()
        self.argument = cache_argument(model)
        self.slot_pos = None  # [B, S] long

    @property
    def slots(self) -> int:
        return 0 if self.slot_pos is None else int(self.slot_pos.shape[1])

    def masks(self, positions: torch.Tensor, dtype, device, tree: torch.Tensor | None = None):
        """Additive masks [B, 1, m, S + m] for queries at `positions` [B, m] whose own slots come next
        (their slot positions are `positions`): one per attention type. `tree` [B, m, m] bool: which
        of this forward's nodes each query may see (its ancestors and itself; None: the position
        rule, a chain's causal order)."""
        kpos = positions if self.slot_pos is None else torch.cat([self.slot_pos, positions], dim=1)
        base = kpos[:, None, :] <= positions[:, :, None]
        if tree is not None:
            base = base.clone()
            base[:, :, self.slots:] = tree.to(base.device)
        out = {}
        for k in self.kinds:
            allowed = base
            if k == SLIDING_ATTENTION and self.window is not None:
                allowed = base & (kpos[:, None, :] > positions[:, :, None] - int(self.window))
            mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
            mask.masked_fill_(~allowed.to(device), torch.finfo(dtype).min)
            out[k] = mask[:, None]
        return out[self.kinds[0]] if len(self.kinds) == 1 else out

    def appended(self, slot_pos: torch.Tensor) -> None:
        """The slots the last forward appended, with their positions (`NO_POSITION`: never seen)."""
        self.slot_pos = slot_pos if self.slot_pos is None else torch.cat([self.slot_pos, slot_pos], dim=1)

    def gather_last(self, columns: torch.Tensor) -> None:
        """Among the last m slot columns (appended by the last forward, not yet in `slot_pos`), row b's
        column j becomes its column columns[b, j] ([B, m] offsets into those m): a tree's accepted
        path moved to the front, so what no row kept can be cropped."""
        m = int(columns.shape[1])
        for layer in _cache_layers(self.cache):
            for name in ("keys", "values"):
                t = getattr(layer, name)
                idx = columns.to(t.device)[:, None, :, None].expand(t.shape[0], t.shape[1], m, t.shape[3])
                t[:, :, -m:] = t[:, :, -m:].gather(2, idx)

    def keep_paths(self, paths: list[list[int]], n: list[int]) -> torch.Tensor:
        """After a tree forward of m nodes per row (not yet in `slot_pos`): row b keeps its root and
        the nodes `paths[b]`, moved to the front of the m new columns at positions n[b] .. n[b] +
        len(path) (the rest masked, then the columns no row kept cropped). Returns the [B, m] column
        order (the kept nodes first), to pick the same columns of anything else the forward gave."""
        B, m = len(paths), int(_cache_layers(self.cache)[0].keys.shape[2]) - self.slots
        cols = torch.zeros(B, m, dtype=torch.long)
        kept = torch.full((B, m), NO_POSITION, dtype=torch.long)
        for b, path in enumerate(paths):
            cols[b, : len(path) + 1] = torch.tensor([0] + path)
            kept[b, : len(path) + 1] = int(n[b]) + torch.arange(len(path) + 1)
        self.gather_last(cols)
        self.appended(kept.to(self.slot_pos.device))
        self.crop_new(m - 1 - max(len(p) for p in paths))
        return cols

    def crop_new(self, drop: int) -> None:
        """Drop the last `drop` slot columns (the newest: what no row kept)."""
        if drop > 0:
            self.cache.crop(-drop)
            self.slot_pos = self.slot_pos[:, : self.slots - drop]

    def select(self, keep: torch.Tensor) -> None:
        """Keep rows `keep`, then drop trailing slot columns no kept row uses."""
        keep = keep.to(self.slot_pos.device)
        self.slot_pos = self.slot_pos[keep]
        used = (self.slot_pos != NO_POSITION).any(0).nonzero()
        width = int(used.max()) + 1 if used.numel() else 0
        for layer in _cache_layers(self.cache):
            k = keep.to(layer.keys.device)
            layer.keys, layer.values = layer.keys[k, :, :width], layer.values[k, :, :width]
        self.slot_pos = self.slot_pos[:, :width]

    def join(self, other: BatchTargetCache) -> None:
        """Append `other`'s rows (after this cache's), both padded to the wider slot count."""
        width = max(self.slots, other.slots)

        def pad(t, dim):
            extra = width - t.shape[dim]
            if extra <= 0:
                return t
            shape = list(t.shape)
            shape[dim] = extra
            fill = NO_POSITION if t.dtype == torch.long else 0
            return torch.cat([t, torch.full(shape, fill, dtype=t.dtype, device=t.device)], dim=dim)

        for mine, theirs in zip(_cache_layers(self.cache), _cache_layers(other.cache)):
            mine.keys = torch.cat([pad(mine.keys, 2), pad(theirs.keys, 2)], dim=0)
            mine.values = torch.cat([pad(mine.values, 2), pad(theirs.values, 2)], dim=0)
        self.slot_pos = torch.cat([pad(self.slot_pos, 1), pad(other.slot_pos, 1)], dim=0)


def tree_inputs(props) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One tree per row -> (tokens [B, m], depths [B, m], tree [B, m, m] bool: node i sees node j,
    its ancestors and itself), m the largest tree; a smaller tree is padded with nodes under its
    root (seen by no other node, never accepted); a token outside the target vocab (-1) is fed as 0."""
    B, m = len(props), max(p.size for p in props)
    toks = torch.zeros(B, m, dtype=torch.long)
    depth = torch.ones(B, m, dtype=torch.long)
    tree = torch.zeros(B, m, m, dtype=torch.bool)
    for b, p in enumerate(props):
        toks[b, : p.size] = torch.tensor(p.tokens).clamp_min(0)
        depth[b, : p.size] = torch.tensor(p.depth)
        for i in range(m):
            tree[b, i, i] = True
            a = i if i < p.size else 0
            while a >= 0:
                tree[b, i, a] = True
                a = p.parent[a]
    return toks, depth, tree


def _join_drafter(mine: BatchDrafter, theirs: BatchDrafter) -> None:
    """Append `theirs`' rows to `mine` (step-0 caches padded to the wider slot count)."""
    a, b = mine.kv, theirs.kv
    width = max(a.k.shape[2], b.k.shape[2])

    def pad(t, dim, fill):
        extra = width - t.shape[dim]
        if extra <= 0:
            return t
        shape = list(t.shape)
        shape[dim] = extra
        return torch.cat([t, torch.full(shape, fill, dtype=t.dtype, device=t.device)], dim=dim)

    a.k = torch.cat([pad(a.k, 2, 0), pad(b.k, 2, 0)])
    a.v = torch.cat([pad(a.v, 2, 0), pad(b.v, 2, 0)])
    a.pos = torch.cat([pad(a.pos, 1, NO_POSITION), pad(b.pos, 1, NO_POSITION)])
    mine.h_last = torch.cat([mine.h_last, theirs.h_last])
    mine.logits_last = torch.cat([mine.logits_last, theirs.logits_last])
    mine.n = torch.cat([mine.n, theirs.n])
    mine.forwards += theirs.forwards
    mine.seconds += theirs.seconds


class _Row:
    """One prompt in the batch: its output, generator, root and position."""

    def __init__(self, ids: list[int], index: int, generator):
        self.out = PromptRun(index, list(ids))
        self.gen = generator
        self.root = None
        self.n = len(ids)
        self.done = False


@torch.inference_mode()
def speculate_batched(target: Target, draft, items, settings: SpecSettings, run: SpecRun, *, layers: list[int],
                      generators, batch_size: int, on_round=None, on_prompt=None) -> list[PromptRun]:
    """Speculate (chains or trees) on `items` [(token ids, index)] keeping up to `batch_size` prompts in the
    batch; counts go to `run`; returns the PromptRuns in `items`' order. `generators`: one per item."""
    from helpers.speculate.verify import _eos_ids, chain_expectation, greedy_walk, verify

    d = settings.drafting
    steps = d.steps
    T = float(settings.temperature)
    rule = settings.rule
    is_chain = d.is_chain
    sample_chain = T > 0 and rule.samples_draft  # chains only: a tree's nodes are the draft's top-k
    dev = target.input_device
    model = target.model
    eos = _eos_ids(target)
    t_start = time.perf_counter()
    t_target = 0.0
    calls = {"target": 0, "draft": 0}
    draft_seconds = 0.0
    keep_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
    ar = torch.arange(steps + 1, device=dev)
    items = list(items)
    rows_all = [_Row(ids, index, g) for (ids, index), g in zip(items, generators)]
    waiting = list(range(len(rows_all)))
    active: list[int] = []  # indices into rows_all, in batch-row order
    tc: BatchTargetCache | None = None
    drafter: BatchDrafter | None = None

    def forward(cache: BatchTargetCache, x, positions, keep=None, tree=None):
        """The target over x [B, m] at `positions`; logits [B, m, V], or at columns `keep` only;
        `tree` [B, m, m]: which of these nodes each sees (None: a chain's causal order)."""
        nonlocal t_target
        t0 = time.perf_counter()
        B, m = x.shape
        mask = cache.masks(positions, model.dtype, dev, tree)
        extra = {} if keep is None else {"logits_to_keep": keep}
        out = model(input_ids=x, use_cache=True, **{cache.argument: cache.cache}, position_ids=positions,
                     cache_position=torch.arange(cache.slots, cache.slots + m, device=dev),
                     attention_mask=mask, **extra).logits
        t_target += time.perf_counter() - t0
        calls["target"] += 1
        return out

    def emit(row: _Row, tok, kind, pos=-1):
        o = row.out
        o.output_ids.append(int(tok)), o.kinds.append(kind), o.draft_pos.append(pos)
        return len(o.output_ids) >= settings.max_new_tokens or int(tok) in eos

    def prefill(batch: list[int], cap) -> tuple[BatchTargetCache, BatchDrafter]:
        """Prefill `batch` (indices into rows_all) together: a new cache and drafter for them."""
        cache, dr = BatchTargetCache(model), BatchDrafter(draft, settings.reading)
        prompts = [rows_all[i].out.prompt_ids for i in batch]
        L = max(len(p) for p in prompts)
        lens = torch.tensor([len(p) for p in prompts], device=dev)
        x = torch.tensor([p + [0] * (L - len(p)) for p in prompts], device=dev)
        pos = torch.arange(L, device=dev)[None].expand(len(batch), L)
        cap.clear()
        # the head only at each row's last prompt position (the columns any row ends at)
        lasts = sorted({len(p) - 1 for p in prompts}) if keep_logits else list(range(L))
        logits = forward(cache, x, pos, torch.tensor(lasts, device=dev) if keep_logits else None)
        column = {c: j for j, c in enumerate(lasts)}
        cache.appended(torch.where(pos < lens[:, None], pos, torch.full_like(pos, NO_POSITION)))
        aux = cap.aux()
        nxt = []
        for r, i in enumerate(batch):
            row = rows_all[i]
            run.target_forwards += 1
            run.target_tokens_fed += len(prompts[r])
            last = logits[r, column[len(prompts[r]) - 1]].float()
            first = int(last.argmax()) if T <= 0 else int(torch.multinomial(
                torch.softmax(last / T, -1), 1, generator=row.gen))
            row.root = first
            nxt.append(prompts[r][1:] + [first] + [0] * (L - len(prompts[r])))
            row.done = emit(row, first, "target")
            run.draft_forwards += 1
        dr.extend(aux, torch.tensor(nxt, device=dev), lens)
        calls["draft"] += 1
        return cache, dr

    def admit(cap) -> None:
        """Fill the batch from the waiting prompts (prefilled together, then joined)."""
        nonlocal tc, drafter
        room = batch_size - len(active)
        if room <= 0 or not waiting:
            return
        batch = [waiting.pop(0) for _ in range(min(room, len(waiting)))]
        cache, dr = prefill(batch, cap)
        if tc is None:
            tc, drafter = cache, dr
        else:
            tc.join(cache)
            _join_drafter(drafter, dr)
        active.extend(batch)

    def leave() -> None:
        """Finished prompts leave the batch."""
        nonlocal tc, drafter, draft_seconds
        keep = [r for r, i in enumerate(active) if not rows_all[i].done]
        if len(keep) == len(active):
            return
        for i in active:
            if rows_all[i].done:
                _finish(rows_all[i])
        if not keep:
            active.clear()
            draft_seconds += drafter.seconds
            tc, drafter = None, None
            return
        idx = torch.tensor(keep)
        tc.select(idx)
        drafter.select(idx)
        active[:] = [active[r] for r in keep]

    def _finish(row: _Row) -> None:
        if target.tokenizer is not None:
            row.out.text = target.tokenizer.decode(row.out.output_ids)
            row.out.pieces = [target.tokenizer.decode([t]) for t in row.out.output_ids]
        if on_prompt is not None:
            on_prompt(row.out)

    def record(row: _Row, drafted: list[int], k: int, tok: int, how: str, fed: int, exact=None) -> None:
        """A verify step's outcome for one row: k drafted tokens accepted (`drafted[:k]`), then `tok`
        ('correction' or 'bonus'); counted as `speculate_prompt` counts it. `exact`: (Proposal,
        logits) of an argmax-drafted chain, for the exact per-position expectation."""
        run.target_forwards += 1
        run.target_tokens_fed += fed
        run.draft_forwards += steps  # as one at a time: steps - 1 drafting steps, one extend
        out = row.out
        before = len(out.output_ids)
        remaining = settings.max_new_tokens - before
        done = False
        for jj, t in enumerate(drafted[:k]):
            if emit(row, t, "draft", jj):
                done = True
                break
        if not done:
            done = emit(row, tok, how)
        emitted = len(out.output_ids) - before
        run.record_step(out, remaining, emitted)
        if run.expected_per_position is not None and exact is not None:
            ex = chain_expectation(exact[0], exact[1], T, rule)
            mm = min(len(ex), remaining - 1)
            run.expected_per_position[:mm] += ex[:mm]
        if emitted < k + 1:
            out.cut_from = k + 1
        row.n += 1 + k
        row.root = tok
        row.done = done
        if on_round is not None:
            on_round(out)

    def chain_round(rows: list[_Row], cap) -> None:
        """Every row's chain drafted, verified and kept (tensor ops; see the module docstring)."""
        m = steps + 1
        chains = drafter.propose_chains(torch.tensor([r.root for r in rows], device=dev), steps,
                                        sample=sample_chain, temperature=T or 1.0,
                                        generators=[r.gen for r in rows], draft_top_k=rule.draft_top_k)
        calls["draft"] += steps - 1
        toks = chains.tokens  # [B, m] target ids, -1 outside the target vocab (fed as 0, never accepted)
        n = torch.tensor([r.n for r in rows], device=dev)
        positions = n[:, None] + ar[None]
        cap.clear()
        logits = forward(tc, toks.clamp_min(0), positions)
        aux = cap.aux()
        if T <= 0:
            # `verify`'s greedy walk on every chain at once: drafted token j is kept while every
            # token before it was kept and it is the target's argmax after token j - 1; the next
            # token is the argmax after the last kept one. `max`'s indices are argmax's (the first
            # maximal value), at a third of a bf16 argmax's time on CPU.
            best = logits.max(-1).indices  # [B, m]
            acc = (toks[:, 1:] == best[:, :-1]).long().cumprod(1).sum(1)  # [B] drafted tokens kept
            nxt = best.gather(1, acc[:, None])[:, 0]
        else:
            walks = [verify(chains.proposal(b), logits[b], T, drafter, row.gen, rule) for b, row in enumerate(rows)]
            acc = torch.tensor([len(w[0]) for w in walks], device=dev)
            nxt = torch.tensor([w[1] for w in walks], device=dev)
        j = ar[None]
        kept = torch.where(j <= acc[:, None], positions, torch.full_like(positions, NO_POSITION))
        # what step 0 of the draft reads next: the kept drafted tokens, then the next token, then padding
        nxt_ids = torch.where(j < acc[:, None], toks.roll(-1, 1),
                              torch.where(j == acc[:, None], nxt[:, None], torch.zeros_like(toks)))
        acc_l, nxt_l, toks_l = acc.tolist(), nxt.tolist(), toks.tolist()
        for b, row in enumerate(rows):
            k = acc_l[b]
            exact = (chains.proposal(b), logits[b]) if run.expected_per_position is not None else None
            record(row, toks_l[b][1:], k, nxt_l[b], "correction" if k < steps else "bonus", m, exact)
        tc.appended(kept)
        tc.crop_new(m - 1 - max(acc_l))  # the new columns no row kept (a row's other rejected slots stay, masked)
        drafter.extend(aux, nxt_ids, acc + 1)
        calls["draft"] += 1

    def tree_round(rows: list[_Row], cap) -> None:
        """Every row's tree drafted (`BatchDrafter.propose_trees`), verified in ONE target forward
        (each row its own tree mask over its own cache), each row's accepted path kept."""
        B = len(rows)
        props = drafter.propose_trees([r.root for r in rows], steps, d.topk, d.num_draft_tokens)
        calls["draft"] += steps - 1
        toks, depth, tree = tree_inputs(props)
        m = int(toks.shape[1])
        n = torch.tensor([r.n for r in rows])
        positions = (n[:, None] + depth).to(dev)
        cap.clear()
        logits = forward(tc, toks.to(dev), positions, tree=tree)
        aux = cap.aux()
        if T <= 0:
            best = logits.max(-1).indices.tolist()  # [B, m] argmax ids (`max`'s indices: the first maximal)
            walks = [greedy_walk(p, best[b]) for b, p in enumerate(props)]
        else:
            walks = [verify(p, logits[b], T, drafter, row.gen, rule) for b, (p, row) in enumerate(zip(props, rows))]
        acc_l = [len(w[0]) for w in walks]
        cols = tc.keep_paths([w[0] for w in walks], [r.n for r in rows])
        nxt_ids = torch.zeros(B, m, dtype=torch.long)  # what step 0 of the draft reads next, then padding
        for b, ((path, tok, how), p, row) in enumerate(zip(walks, props, rows)):
            nxt_ids[b, : len(path) + 1] = torch.tensor([p.tokens[c] for c in path] + [tok])
            chain = all(p.parent[i] == i - 1 for i in range(1, p.size))
            exact = (p, logits[b, : p.size]) if chain and run.expected_per_position is not None else None
            record(row, [p.tokens[c] for c in path], len(path), tok, how, p.size, exact)
        aux_cols = cols.to(aux.device)[:, :, None].expand(B, m, aux.shape[-1])
        drafter.extend(aux.gather(1, aux_cols), nxt_ids.to(dev), torch.tensor(acc_l, device=dev) + 1)
        calls["draft"] += 1

    with HiddenStateCapture(target, layers) as cap:
        while waiting or active:
            admit(cap)
            leave()
            if not active:
                continue
            rows = [rows_all[i] for i in active]
            (chain_round if is_chain else tree_round)(rows, cap)
            leave()
    run.seconds["target"] += t_target
    run.seconds["draft"] += draft_seconds
    run.seconds["total"] += time.perf_counter() - t_start
    run.batched_forwards["target"] += calls["target"]
    run.batched_forwards["draft"] += calls["draft"]
    return [r.out for r in rows_all]
