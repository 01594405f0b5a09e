"""Run llama.cpp's own `convert_hf_to_gguf.py`, with one change to its vocabulary step only.

    PYTHONPATH=LLAMA_CPP_DIR:LLAMA_CPP_DIR/gguf-py <llama.cpp venv>/bin/python scripts/llamacpp_convert.py LLAMA_CPP_DIR HF_FOLDER [flags...]

Runs inside the llama.cpp environment (scripts/llamacpp.py builds it and runs this file by path: it
imports nothing from the repository), never in the kit's. The
converter identifies a BPE tokenizer by hashing what it does to a test text and refuses one it does
not know ("BPE pre-tokenizer was not recognized"); the bundled pairs' tokenizer is a small WordPiece
vocabulary made by scripts/make_engine_pair.py, which it does not know. So, only when the
converter's own detection fails, the vocabulary is written as llama.cpp's WordPiece type ("bert")
with the same token list. Tensors, their names, the EAGLE-3 metadata and the d2t step are the
converter's, untouched: the engine tests feed the server token ids, so the vocabulary's words are
never used, only its size. A real model's tokenizer takes the converter's own path.
"""
from __future__ import annotations

import runpy
import sys


def main() -> None:
    src = sys.argv.pop(1)
    import conversion.base as base  # the converter's own package: LLAMA_CPP_DIR and its gguf-py are on PYTHONPATH
    import gguf

    detect = base.TextModel.get_vocab_base_pre
    gpt2 = base.TextModel._set_vocab_gpt2

    def vocab(self) -> None:
        try:
            return gpt2(self)  # the converter's own path (it raises before writing anything)
        except NotImplementedError:
            pass
        # the converter's own detection failed: write the same tokens as llama.cpp's WordPiece vocabulary
        base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "default"
        try:
            tokens, toktypes, tokpre = self.get_vocab_base()
        finally:
            base.TextModel.get_vocab_base_pre = detect
        self.gguf_writer.add_tokenizer_model("bert")
        self.gguf_writer.add_tokenizer_pre(tokpre)
        self.gguf_writer.add_token_list(tokens)
        self.gguf_writer.add_token_types(toktypes)
        gguf.SpecialVocab(self.dir_model, load_merges=False, n_vocab=len(tokens)).add_to_gguf(self.gguf_writer)

    base.TextModel._set_vocab_gpt2 = vocab
    sys.argv[0] = src + "/convert_hf_to_gguf.py"
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
