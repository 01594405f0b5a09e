"""A target and its draft, loaded together: `load_pair(target, checkpoint, ...)`.

The one sequence the CLI (`speculate`), notebook 07 and the dashboard's speculate panel share:
open the draft checkpoint once (`open_checkpoint`: config and tensor headers), load the target
(or take one already loaded), load the draft from that open `Checkpoint` onto the target's input
device in its dtype (`load_draft`: the memory estimate is checked before any tensor is read, each
weights file is read in one pass), then check that the draft fits the target
(`draft_mismatches`, with the loaded draft's embedding: no file is read again). A draft that
does not fit is refused with one `BadInputError` line naming every mismatch.
"""
from __future__ import annotations

from helpers.core.errors import BadInputError
from helpers.io.checkpoint import Checkpoint, open_checkpoint
from helpers.model.draft import Eagle3Draft, load_draft
from helpers.model.target import Target, check_speculation_target, draft_mismatches, load_target


def load_pair(target, checkpoint, *, device=None, dtype=None, embed_from=None,
              draft_config=None) -> tuple[Target, Eagle3Draft]:
    """(target, draft): `target` a folder or a loaded `Target`; `checkpoint` a path / URL or an open
    `Checkpoint`. Refuses a draft that does not fit the target (vocab, hidden size, embedding). A
    draft with no embed_tokens and no `embed_from` uses the target's embedding, as the engines do
    (`draft.embed_borrowed_from` names the target then; None otherwise)."""
    if not isinstance(target, Target):
        check_speculation_target(target)  # a family the loop cannot run: one line, before anything loads
    ck = checkpoint if isinstance(checkpoint, Checkpoint) else open_checkpoint(checkpoint)
    tgt = target if isinstance(target, Target) else load_target(target, device=device, dtype=dtype)
    borrowed = None
    if not embed_from and ck.tensors.find("embed_tokens.weight") is None:
        # a draft without embed_tokens borrows the target's, as the engines do: the target is at hand
        embed_from = borrowed = str(tgt.path)
    draft = load_draft(ck, device=tgt.input_device, dtype=tgt.dtype, embed_from=embed_from or None,
                       draft_config=draft_config)
    draft.embed_borrowed_from = borrowed  # None: the draft's own embedding, or the --embed-from given
    bad = draft_mismatches(tgt, draft)
    if bad:
        raise BadInputError(draft.source, f"does not fit the target {tgt.path}: " + "; ".join(bad))
    return tgt, draft
