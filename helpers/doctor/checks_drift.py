"""The doctor's target-drift check (`doctor DRAFT --target TARGET --samples DIR`).

The target is loaded and run over the samples' own token ids; its states at the draft's aux
layers are compared with the stored ones (`helpers.model.drift.check_drift`). A target
quantized, rotated or moved to another revision after the draft was trained (vllm-ascend#5974)
passes every file check and still lowers acceptance: `target-drift` names it, a warning when the
draft's step-0 argmax still mostly agrees, an error when it does not. The acceptance it costs is
`d2t-lab drift`'s to predict (the doctor does not score the draft).
"""
from __future__ import annotations

from helpers.doctor.findings import CheckContext
from helpers.model.drift import AGREEMENT_LIMIT, RELATIVE_ERROR_LIMIT, check_drift

SAMPLES_PER_SPLIT = 32  # the doctor compares this many samples per split (enough to name a drift)


def check_target_drift(c: CheckContext, target, samples, *, max_samples: int | None = SAMPLES_PER_SPLIT) -> None:
    """`target-drift` when the target's aux states on the samples' ids differ from the stored ones."""
    import torch

    from helpers.model.draft import load_draft
    from helpers.model.target import load_target

    tgt = load_target(target, device="cpu", dtype=torch.float32)
    draft = load_draft(c.ck, device="cpu", dtype=torch.float32, embed_from=target)
    from helpers.engines.registry import aux_engines

    engine = next((e for e in c.engines if e in aux_engines()), aux_engines()[0])  # one whose capture was read
    d = check_drift(samples, target=tgt, draft=draft, engine=engine, max_samples=max_samples)
    if not d.drifted:
        return
    severity = "error" if d.severe else "warning"
    cmd = f"d2t-lab drift {c.ck.path} --target {target} --samples {samples}"
    c.add("target-drift", severity,
          f"the target's hidden states on the samples' own tokens are not the ones the draft was trained on "
          f"({d.kind()}): {d.summary()} (limits: relative error {RELATIVE_ERROR_LIMIT}, "
          f"agreement {100 * AGREEMENT_LIMIT:.0f} %); a quantized, rotated or re-released target",
          f"serve the target revision and precision the draft was trained on, or retrain (or, for a rotation, "
          f"rotate the draft's fc) on states captured from this build; the predicted acceptance loss: {cmd}")
