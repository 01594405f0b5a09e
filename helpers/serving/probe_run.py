"""`d2t-lab probe` from start to conclusion: `probe(ProbeInputs)` -> `Probed` (its JSON and text).

The command checks its flags and opens its inputs at the door (`helpers.model.preflight`: the
prompt records, and with a target its config and the draft's checkpoint, read once), builds one
`ProbeInputs` of them and prints what `probe` hands back. Here, in order: the prompt records (with
a target) rendered to token ids with its chat template, the server discovered (with a target,
whether it serves that model: `probe_client.served_mismatch`), what it was started with
(`helpers.serving.startup.stated_setup`: the server itself,
then `--log`, then `--launch-command`; forced acceptance stops here, no request sent), the prompts
sent (`helpers.serving.probe.measure`, `repeat` times), the drafting settings, the doctor's
`eagle3-as-eagle` for the stated algorithm (`ProbeInputs.judge`, handed in by the command: the
doctor sits above serving), with a target its own greedy output and with a draft
the engine-free loop and `reproduce` (`compare`), the engine's own defect, the conclusion.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from helpers.core.errors import BadInputError


@dataclass(frozen=True)
class ProbeInputs:
    """What one probe is given, each read once from the command line (`d2t-lab probe --help`)."""

    url: str
    prompts: Path  # the prompt file as given (shown in the JSON)
    bundled: bool  # the bundled default prompt file (no --prompts)
    inputs: object  # the door's opened `helpers.model.preflight.Inputs`: the prompt records (`records`, at most
    #                 --max-prompts), with --target its config (`target_cfg`), with --checkpoint the draft (`opened`)
    max_new_tokens: int
    api_key: str | None = None
    model: str | None = None  # the served model asked for (None: the first /v1/models lists)
    repeat: int = 1
    temperature: float = 0.0
    seed: int | None = None
    target: str | None = None
    checkpoint: str | None = None  # the draft as given (its open `Checkpoint`: `inputs.opened`)
    log: str | None = None
    launch_command: str | None = None
    engine: str | None = None  # whose aux-layer convention the engine-free loop uses (None: the server's)
    batch_size: int = 1
    given: object = None  # the drafting flags' `Drafting`, None when none given
    chat_template: str | None = None
    device: str | None = None
    dtype: str | None = None
    embed_from: str | None = None
    progress: bool = False
    # the doctor's eagle3-as-eagle on what the server states (`Setup` -> finding dicts): handed in, since
    # the doctor sits above serving (`helpers.doctor.served_algorithm.algorithm_findings`)
    judge: object = None


@dataclass
class Probed:
    """What `probe` hands back: the result, or (forced acceptance) only what the server states."""

    server: object  # helpers.serving.probe_client.Server
    model: str | None
    setup: object  # helpers.serving.startup.Setup
    result: object = None  # helpers.serving.probe_verdict.ProbeResult; None when acceptance is forced
    repetitions: tuple | None = None  # (intervals, baselines) with repeat > 1
    repeat: int = 1
    requests: int = 0  # requests per repetition

    def to_dict(self) -> dict:
        if self.result is None:  # no request is sent, nothing is concluded
            setup = self.setup
            return {"url": self.server.url, "engine": self.server.engine, "model": self.model,
                    "forced_acceptance": dict(setup.forced),
                    "speculative_algorithm": {k: v for k, v in setup.to_dict().items() if k != "forced_acceptance"},
                    "requests": [], "accept_length": None, "stderr": None, "conclusion": None, "findings": [],
                    "serving_findings": [], "notes": []}
        obj = self.result.to_dict()
        if self.repetitions is not None:
            from helpers.serving import over_time

            obj["repetitions"] = over_time.to_json(*self.repetitions)
        return obj

    def report(self) -> str:
        if self.result is None:
            from helpers.serving.startup import forced_line

            return f"probe: {self.server.url}: {forced_line(self.setup.forced)}"
        text = self.result.report()
        if self.repetitions is not None:
            from helpers.serving import over_time

            reps, baselines = self.repetitions
            text += "\n" + "\n".join([f"  per repetition ({self.repeat} x {self.requests} requests, in a row):"]
                                      + [over_time.line(iv) for iv in reps]
                                      + over_time.summary_lines(reps, baselines, 1))
        return text


def probe(given: ProbeInputs) -> Probed:
    """Send the prompts to the server at `given.url`, measure it and conclude (module docstring)."""
    from helpers.io import remote_access
    from helpers.serving.probe import drafting_of, measure
    from helpers.serving.probe_client import discover, served_mismatch
    from helpers.serving.probe_verdict import ProbeResult, conclude, engine_defect

    records = given.inputs.records
    ids = None
    if given.target:  # each record rendered with the target's tokenizer and chat template, as `speculate` does
        from transformers import AutoTokenizer

        from helpers.io.chat import prompt_ids, uses_template

        tok = AutoTokenizer.from_pretrained(given.target)
        template = uses_template(tok, given.chat_template)
        ids = [prompt_ids(tok, r.prompt_messages(), template) for r in records]
    from helpers.serving.startup import stated_setup

    server = discover(given.url, remote_access.timeout(), api_key=given.api_key)
    model = given.model or (server.models[0] if server.models else None)
    # another model's folder as --target: named (the config the door read)
    mismatch = None if ids is None else served_mismatch(server, model, given.target, given.inputs.target_cfg)
    setup = stated_setup(server.setup, given.log, given.launch_command)
    if setup.forced:  # no request is sent, nothing is concluded
        return Probed(server, model, setup)
    if model is None and server.needs_model(ids is not None):
        raise BadInputError(server.url, "lists no model under /v1/models: pass --model NAME")
    sent = [(r.index, None if ids is None else ids[k], r.prompt_messages()) for k, r in enumerate(records)]
    runs = [measure(server, sent, max_new_tokens=given.max_new_tokens, model=model, progress=given.progress,
                    temperature=given.temperature, seed=given.seed) for _ in range(given.repeat)]
    measured = runs[0]
    g = given.given
    drafting, drafting_source, notes = drafting_of(server, measured, log=given.log,
                                                   num_speculative_tokens=g.steps if g and g.is_chain else None)
    if g is not None and drafting_source not in ("/get_server_info", "num_spec_tokens in the answers"):
        drafting, drafting_source = g, "the drafting flags"  # the server states none: the flags' shape
    result = ProbeResult(measured, model, drafting, drafting_source, str(given.prompts), given.bundled,
                         given.max_new_tokens, notes=notes, setup=setup, temperature=given.temperature,
                         seed=given.seed)
    result.serving_findings = given.judge(setup) if given.judge is not None else []
    if ids is None:
        result.notes.append("the served tokens are not checked: sent as chat messages without --target (pass --target "
                            "DIR: the prompts then go as the target's token ids and the served text is compared with "
                            "the target's own greedy output)")
    else:
        result.served_mismatch = mismatch
        compare(given, ids, result)
        if result.served_mismatch and result.target_check and result.target_check.get("verdict") in ("lossy",
                                                                                                 "near ties only"):
            result.target_check["verdict"] = "target mismatch"
    release = None
    if given.log:
        from helpers.serving.startup import read_engine_version

        ev = read_engine_version(given.log)
        release = ev[1] if ev else None
    result.engine_defect = engine_defect(result, release)
    result.conclusion = conclude(measured.accept_length, measured.stderr, result.engine_free, result.reproduce,
                                 result.engine_defect)
    repetitions = None
    if given.repeat > 1:
        from helpers.serving import over_time

        reps = over_time.from_repetitions(runs)
        repetitions = (reps, over_time.flag(reps, 1))
    return Probed(server, model, setup, result, repetitions, given.repeat, len(sent))


def compare(given: ProbeInputs, ids, result) -> None:
    """The target's own greedy output and, with a checkpoint, the engine-free loop and `reproduce`."""
    from helpers.core.devices import parse_dtype

    try:
        dtype = parse_dtype(given.dtype)
    except ValueError as e:
        raise BadInputError(None, f"--dtype: {e}") from None
    from helpers.model.target import check_speculation_config, load_target
    from helpers.serving.probe_verdict import check_target, compare_engine_free

    m = result.measured
    if given.checkpoint:  # a family the loop cannot run: one line, before loading (the config the door read)
        check_speculation_config(given.target, given.inputs.target_cfg)
    target = load_target(given.target, device=given.device, dtype=dtype)
    if given.temperature > 0:  # sampled answers are not the target's greedy output by design
        result.notes.append(f"the served tokens are not compared with the target's greedy output: the requests were "
                            f"sampled (T = {given.temperature:g})")
    else:
        result.target_check = check_target(target, ids, m.requests)
    if not given.checkpoint:
        return
    if result.drafting is None:
        raise BadInputError(m.server.url, "does not say how it drafts: pass --num-speculative-tokens K (vLLM) or "
                            "--log FILE (its start-up log) for the engine-free comparison")
    import torch

    from helpers.model.pair import load_pair
    from helpers.speculate.loop import speculate
    from helpers.speculate.reproduce import reproduce
    from helpers.speculate.result import SpecSettings

    _, draft = load_pair(target, given.inputs.opened, device=given.device, dtype=dtype, embed_from=given.embed_from)
    engine = given.engine or m.server.convention
    try:  # checked when made
        settings = SpecSettings(reading="offset" if draft.d2t is not None else "none", drafting=result.drafting,
                                max_new_tokens=given.max_new_tokens, engine=engine, chat_template=given.chat_template,
                                temperature=given.temperature, seed=given.seed or 0, batch_size=given.batch_size)
    except ValueError as e:
        raise BadInputError(None, str(e)) from None
    with torch.inference_mode():
        run = speculate(target, draft, ids, settings, progress=given.progress)
        result.engine_free = compare_engine_free(run, m.requests, m.server.convention,
                                                 m.accept_length, m.stderr)
        result.reproduce = reproduce(target, draft, ids, settings, accept_length=max(1.0, m.accept_length),
                                     stderr=m.stderr, known={"correct": run}, progress=given.progress)
