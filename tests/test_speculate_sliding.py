"""Engine-free speculative decoding on targets with sliding-window layers, and the families the loop refuses.

Tiny random targets built with transformers' own classes (Mistral: every layer slides; GPT-OSS and
Gemma 2: sliding and full layers alternate; Gemma 3: two sliding layers, then a full one), window
8, a 5-token prompt and 64 new tokens, so the window is passed early in every run. The Mistral
target carries the bundled tiny Llama target's weights (Mistral is Llama with a window), so the
bundled draft is accepted on it and accepted rows are really kept; on the random-weight ones
nearly every draft is rejected, so the row cuts of accepted tree nodes are checked by forcing
random accepted paths and comparing each verify row with the model's own forward without a cache.
"""
from __future__ import annotations

import shutil

import pytest
import torch
from test_speculate import CHI2_19_AT_0_001, _chi2, _pit_values

import helpers.speculate.loop as S
from helpers.acceptance.drafting import Drafting
from helpers.model.draft import load_draft
from helpers.model.drafter import Proposal
from helpers.model.target import (
    Target,
    attention_layout,
    load_target,
    speculation_refusal,
)
from helpers.speculate.target_cache import TargetCache
from conftest import SAMPLES


TINY = SAMPLES / "tiny_target"
DRAFT = SAMPLES / "tiny_draft_sglang"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "vocab.json")
FAMILIES = ("mistral", "gpt_oss", "gemma2", "gemma3")
PROMPT = [1, 17, 240, 9, 1000]  # shorter than the window: the window is crossed while speculating
NEW = 64
CHAIN = {"drafting": Drafting(5)}
TREE = {"drafting": Drafting(3, 4, 8)}
S_, F_ = "sliding_attention", "full_attention"


def _model(family: str, window: int = 8):
    """A tiny `family` causal LM (hidden 64, vocab 4096: the bundled draft fits it)."""
    import transformers as T

    torch.manual_seed(0)
    c = dict(vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, max_position_embeddings=512, sliding_window=window,
             tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    if family == "mistral":  # the bundled Llama target's shape and weights
        from safetensors.torch import load_file

        c.update(num_hidden_layers=8, num_key_value_heads=4, intermediate_size=192, rms_norm_eps=1e-6)
        model = T.MistralForCausalLM(T.MistralConfig(**c))
        model.load_state_dict({k: v.float() for k, v in load_file(TINY / "model.safetensors").items()})
    elif family == "gpt_oss":
        model = T.GptOssForCausalLM(T.GptOssConfig(**c, num_local_experts=4, num_experts_per_tok=2,
                                                  layer_types=[S_, F_] * 3))
    elif family == "gemma2":
        model = T.Gemma2ForCausalLM(T.Gemma2Config(**c, query_pre_attn_scalar=16))
    else:
        model = T.Gemma3ForCausalLM(T.Gemma3TextConfig(**c, query_pre_attn_scalar=16, layer_types=[S_, S_, F_] * 2))
    return model.eval()


@pytest.fixture(scope="module")
def draft():
    return load_draft(DRAFT, "cpu", torch.float32)


@pytest.fixture(scope="module")
def target(tmp_path_factory, one_thread):
    """target(family): the family's tiny model saved as a folder (with the bundled tokenizer) and
    loaded by `load_target`, built once per module."""
    built: dict = {}

    def get(fam: str) -> Target:
        if fam not in built:
            folder = tmp_path_factory.mktemp(fam)
            _model(fam).save_pretrained(folder)
            for f in TOKENIZER_FILES:
                if (TINY / f).exists():
                    shutil.copy(TINY / f, folder / f)
            built[fam] = load_target(folder, "cpu", "float32")
        return built[fam]

    return get


_REFS: dict = {}


def _reference(target, ids: list[int], max_new: int) -> list[int]:
    key = (str(target.path), tuple(ids), max_new)
    if key not in _REFS:
        eos = S._eos_ids(target)
        with torch.inference_mode():
            x = torch.tensor([ids])
            g = target.model.generate(input_ids=x, attention_mask=torch.ones_like(x), do_sample=False,
                                      max_new_tokens=max_new, temperature=None, top_p=None, top_k=None,
                                      pad_token_id=0)[0, x.shape[1]:].tolist()
        _REFS[key] = g[:next((i + 1 for i, t in enumerate(g) if t in eos), len(g))]
    return _REFS[key]


@pytest.mark.parametrize("family,types", [("mistral", [S_] * 8), ("gpt_oss", [S_, F_] * 3), ("gemma2", [S_, F_] * 3),
                                          ("gemma3", [S_, S_, F_] * 2)])
def test_layouts_are_read_as_the_models_read_them(family, types):
    model = _model(family)
    assert attention_layout(model.config) == (types, 8)
    if family != "mistral":  # each layer's attention module carries the same window, or none (Mistral: the config's)
        wins = [getattr(layer.self_attn, "sliding_window", None) for layer in model.model.layers]
        assert wins == [8 if k == S_ else None for k in types], wins
    assert speculation_refusal(model.config) is None
    assert speculation_refusal(model.config, model) is None


# -- greedy: token for token the target's own generate -------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_output_equals_generate_every_reading_chain_and_tree(target, draft, family):
    t = target(family)
    ref = _reference(t, PROMPT, NEW)
    assert len(ref) == NEW  # no early stop: the run goes 8x past the window
    means = {}
    for name, shape in (("chain", CHAIN), ("tree", TREE)):
        runs = S.speculate_readings(t, draft, [PROMPT], S.SpecSettings(max_new_tokens=NEW, **shape),
                                    ["offset", "absolute", "none"])
        for reading, run in runs.items():
            assert run.prompts[0].output_ids == ref, (family, name, reading)
            means[name, reading] = run.mean
    if family == "mistral":  # drafts were accepted, so kept rows of accepted nodes fed later rounds
        assert means["chain", "offset"] > 1.3 and means["tree", "offset"] > 1.3, means


# -- the target side alone: random trees, random accepted paths, against the model's own forward ---------
def _random_tree(gen, root: int, size: int, vocab: int) -> Proposal:
    parent, depth = [-1], [0]
    for i in range(1, size):
        p = int(torch.randint(0, i, (1,), generator=gen))
        parent.append(p), depth.append(depth[p] + 1)
    tokens = [root] + torch.randint(3, vocab, (size - 1,), generator=gen).tolist()
    return Proposal(tokens, parent, depth, [-1] * size)


@pytest.mark.parametrize("family", [pytest.param(f, marks=[] if f == "gpt_oss" else [pytest.mark.slow]) for f in FAMILIES])
def test_kept_rows_and_window_masks_equal_the_uncached_forward(family, one_thread):
    """Window 3 (shallower than the trees, so the window cuts ancestors too): every node's verify
    logits equal the model's logits for context + its ancestors + itself computed without a cache."""
    model = _model(family, window=3)
    gen = torch.Generator().manual_seed(1)
    tc = TargetCache(model)
    kw = {tc.argument: tc.cache, "use_cache": True}
    seq = list(PROMPT)
    with torch.inference_mode():
        model(input_ids=torch.tensor([seq]), **kw)
        root, n, worst, accepted = 7, len(seq), 0.0, 0
        for rnd in range(8):
            chain = rnd % 3 == 2
            size = 6
            prop = (Proposal([root] + torch.randint(3, 4096, (size - 1,), generator=gen).tolist(),
                             list(range(-1, size - 1)), list(range(size)), [-1] * size) if chain
                    else _random_tree(gen, root, size, 4096))
            extra = {} if chain else {"attention_mask": tc.tree_masks(prop, n, model.dtype, "cpu")}
            logits = model(input_ids=torch.tensor([prop.tokens]), position_ids=n + torch.tensor([prop.depth]),
                           **kw, **extra).logits[0]
            for i in range(size):  # the node's own sequence: context, ancestors, itself
                path, j = [], i
                while j >= 0:
                    path.append(prop.tokens[j])
                    j = prop.parent[j]
                ref = model(input_ids=torch.tensor([seq + path[::-1]])).logits[0, -1]
                worst = max(worst, float((logits[i] - ref).abs().max()))
            leaf = int(torch.randint(0, size, (1,), generator=gen))  # accept the path to a random node
            path, j = [], leaf
            while j > 0:
                path.append(j)
                j = prop.parent[j]
            path = path[::-1]
            tc.keep(n, [0] + path, chain)
            seq += [prop.tokens[0]] + [prop.tokens[k] for k in path]
            accepted += len(path)
            n, root = len(seq), int(torch.randint(3, 4096, (1,), generator=gen))
            assert tc.cache.get_seq_length() == n
    assert accepted >= 8 and n > 4 * 3
    assert worst < 1e-4, f"{family}: verify logits differ from the uncached forward by {worst:.2e}"


def test_window_rule_on_a_small_tree():
    """The window rule itself: a node at depth d after n tokens sees the context rows
    n + d - W + 1 .. n - 1 and the ancestors within W of it; a full layer sees all of them."""
    from helpers.speculate.target_cache import allowed_rows

    prop = Proposal([5, 6, 7, 8, 9], [-1, 0, 1, 0, 2], [0, 1, 2, 1, 3], [-1] * 5)
    full, slide = allowed_rows(prop, 10), allowed_rows(prop, 10, window=3)
    assert full[4].nonzero().flatten().tolist() == list(range(10)) + [10, 11, 12, 14]
    assert slide[4].nonzero().flatten().tolist() == [11, 12, 14]  # positions 11, 12, 13: itself and two ancestors
    assert slide[3].nonzero().flatten().tolist() == [9, 10, 13]  # depth 1 at position 11: rows 9, 10, itself
    assert slide[0].nonzero().flatten().tolist() == [8, 9, 10]


# -- sampling: the target's own distribution -------------------------------------------------------------
@pytest.mark.slow
def test_sampling_follows_the_target_distribution(target, draft):
    """Every family, chain and tree, 12 prompts shorter than the window x 10 sampled tokens each:
    the PIT values pooled over the families pass the full-attention test's chi-square (>= 800
    tokens, p = 0.001), and so do each family's own."""
    pooled, per_family = [], {}
    for fam in FAMILIES:
        t = target(fam)
        runs = []
        for k, shape in enumerate(({"drafting": Drafting(3)}, {"drafting": Drafting(3, 3, 6)})):
            prompts = [PROMPT[:2 + i % 4] + [100 + i] for i in range(12)]  # 3-6 tokens, each different
            # the textbook rule (draft sampled from q, min(1, p/q)): the rejection path and its residual are what
            # the PIT test checks; the engines' argmax-and-p(t) rule accepts almost nothing from this draft at T 1.5
            runs.append(S.speculate(t, draft, prompts, S.SpecSettings(temperature=1.5, max_new_tokens=10, seed=k,
                                                                      acceptance_rule="textbook", **shape)))
        run = S.SpecRun.merge(runs)
        eos = S._eos_ids(t)
        assert all(len(p.prompt_ids) + len(p.output_ids) > 8 or p.output_ids[-1] in eos for p in run.prompts)
        if fam == "mistral":
            # drafts were accepted: the rejection rule, not only the target, made tokens (token-id prompts, no
            # chat template: fewer than on the bundled prompts)
            assert run.mean > 1.1 and sum(k == "draft" for p in run.prompts for k in p.kinds) >= 20, run.mean
        us = _pit_values(t, run, 1.5)
        per_family[fam] = (_chi2(us), len(us))
        pooled += us
    assert len(pooled) >= 800
    assert _chi2(pooled) < CHI2_19_AT_0_001, f"pooled chi-square {_chi2(pooled):.1f} over {len(pooled)} tokens"
    bad = {f: v for f, v in per_family.items() if v[0] >= CHI2_19_AT_0_001}
    assert not bad, f"chi-square at or above {CHI2_19_AT_0_001}: {bad}"


# -- what the loop cannot run ------------------------------------------------------------------------------
def _configs():
    import transformers as T

    tiny = dict(vocab_size=128, hidden_size=16, num_hidden_layers=2)
    return {
        "t5": (T.T5Config(vocab_size=128, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=2), "encoder-decoder"),
        "mamba": (T.MambaConfig(**tiny, state_size=4), "recurrent state"),
        "llama4": (T.Llama4TextConfig(**tiny, intermediate_size=32, intermediate_size_mlp=32, num_attention_heads=2,
                                      num_key_value_heads=1, head_dim=8, attention_chunk_size=8), "chunked_attention"),
        "gpt2": (T.GPT2Config(vocab_size=128, n_embd=16, n_layer=1, n_head=2), "no layers / norm"),
    }


@pytest.mark.parametrize("name", ["t5", "mamba", "llama4", "gpt2"])
def test_unsupported_families_are_named_by_the_rule(name):
    config, why = _configs()[name]
    assert why in (speculation_refusal(config) or "")


def test_an_unsupported_target_is_one_line_before_loading(cli, tmp_path):
    import transformers as T

    folder = tmp_path / "mamba"
    T.MambaConfig(vocab_size=4096, hidden_size=64, num_hidden_layers=2, state_size=4).save_pretrained(folder)
    # config.json only: were the model loaded, the complaint would be the missing weights
    r = cli("speculate", DRAFT, "--target", folder, "--max-prompts", 1, "--device", "cpu")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    line = r.stderr.strip()
    assert "\n" not in line and str(folder) in line and "recurrent state" in line, line
    # and in process: speculate() refuses a loaded one the same way
    from helpers.core.errors import BadInputError

    model = T.MambaForCausalLM(T.MambaConfig(vocab_size=4096, hidden_size=64, num_hidden_layers=2, state_size=4))
    tgt = Target(model, None, folder, torch.device("cpu"), torch.float32)
    with pytest.raises(BadInputError, match="recurrent state"):
        S.speculate(tgt, None, [[1, 2, 3]], S.SpecSettings(max_new_tokens=4))

