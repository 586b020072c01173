"""Tiny random GGUF models that a real llama-server loads: the server's contract, not a model's.

``write_reranker`` writes a BERT cross-encoder in the layout llama.cpp's convert_hf_to_gguf.py
gives bge-reranker-style models (architecture ``bert``, WordPiece vocabulary, rank pooling, a
classification head with one output), about 1 MB, random weights seeded so every run writes
the same bytes. Its scores mean nothing; they are deterministic raw logits of both signs.
Needs the ``gguf`` package (and numpy). Read from llama.cpp b11434: src/models/bert.cpp,
src/llama-model.cpp (load_hparams), src/llama-vocab.cpp (WPM), gguf-py/gguf/constants.py.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Literal

import numpy as np

# Whole words of one token each, as WordPiece vocabularies hold them: text made of those of at
# most six letters (and punctuation) is counted alike here and by the simulator's pair_tokens.
WORDS: tuple[str, ...] = (
    "the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at",
    "from", "it", "an", "be", "this", "are", "or", "his", "her", "which", "but", "not", "have",
    "has", "had", "they", "you", "we", "he", "she", "were", "their", "been", "one", "all", "there",
    "can", "more", "when", "will", "would", "who", "so", "no", "if", "out", "up", "what", "about",
    "into", "than", "them", "only", "other", "new", "some", "time", "could", "these", "two", "may",
    "first", "then", "do", "any", "like", "my", "now", "over", "such", "our", "man", "me", "even",
    "most", "made", "after", "also", "did", "many", "before", "must", "through", "back", "years",
    "where", "much", "your", "way", "well", "down", "should", "because", "each", "just", "those",
    "how", "too", "little", "state", "good", "very", "make", "world", "still", "own", "see", "men",
    "work", "long", "get", "here", "between", "both", "life", "being", "under", "never", "day",
    "same", "another", "know", "while", "last", "might", "us", "great", "old", "year", "off",
    "come", "since", "against", "go", "came", "right", "used", "take", "three", "query", "score",
    "model", "server", "test", "hello", "quick", "brown", "fox", "jumps", "lazy", "dog", "cat",
    "apple", "banana", "python", "code", "error", "file", "data",
)  # fmt: skip
# llama.cpp's WPM vocabulary marks a word-initial piece with U+2581 (the converter's "phantom
# space"); a "##" continuation piece is stored bare.
_WORD_START = "\u2581"
PairFormat = Literal["bert", "roberta"]


def _vocabulary() -> tuple[list[str], list[int], dict[str, int]]:
    import gguf

    kind = gguf.TokenType
    tokens: list[str] = []
    types: list[int] = []

    def add(token: str, token_type: int) -> None:
        if token not in ids:
            ids[token] = len(tokens)
            tokens.append(token)
            types.append(int(token_type))

    ids: dict[str, int] = {}
    # bert-base-uncased's special ids, llama.cpp's WPM defaults: [CLS] 101, [SEP] 102.
    add("[PAD]", kind.CONTROL)
    for i in range(99):
        add(f"[unused{i}]", kind.UNUSED)
    for special in ("[UNK]", "[CLS]", "[SEP]", "[MASK]"):
        add(special, kind.CONTROL)
    chars = string.ascii_lowercase + string.digits + string.punctuation
    letters = string.ascii_lowercase
    pieces = [
        *(_WORD_START + c for c in chars),
        *chars,
        *(_WORD_START + w for w in WORDS),
        *(_WORD_START + a + b for a in letters for b in letters),
        *(a + b for a in letters for b in letters),
        *(_WORD_START + str(n) for n in range(10, 1000)),
    ]
    for piece in pieces:
        add(piece, kind.NORMAL)
    return tokens, types, ids


def write_reranker(
    path: Path,
    *,
    n_ctx_train: int = 512,
    pair_format: PairFormat = "roberta",
    seed: int = 0,
) -> Path:
    """A tiny reranker at ``path``. ``pair_format``: "roberta" pairs read
    ``[CLS] q [SEP] [SEP] d [SEP]`` (4 special tokens; bge-reranker-v2-m3's XLM-R GGUF sets
    add_bos/add_eos/add_sep), "bert" pairs ``[CLS] q [SEP] d`` (2). ``n_ctx_train`` caps the
    server's slot context (the rows of the position embedding)."""
    import gguf

    n_embd, n_layer, n_head, n_ff = 64, 2, 2, 128
    rng = np.random.default_rng(seed)
    tokens, types, ids = _vocabulary()

    def rnd(*shape: int, std: float = 0.1) -> np.ndarray:
        # std 0.1, not BERT's 0.02: with 0.02 every pair scored -3.6 give or take 0.03
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    def zeros(n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.float32)

    w = gguf.GGUFWriter(str(path), "bert")
    w.add_name("tiny-random-bert-reranker")
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_layer_norm_eps(1e-12)  # bert's load_hparams reads it without a default
    w.add_causal_attention(False)
    w.add_pooling_type(gguf.PoolingType.RANK)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("bert")  # LLAMA_VOCAB_TYPE_WPM
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_type_count(2)  # "bert model needs to define token type count" otherwise
    w.add_bos_token_id(ids["[CLS]"])  # llama.cpp uses BOS as CLS
    w.add_sep_token_id(ids["[SEP]"])
    w.add_unk_token_id(ids["[UNK]"])
    w.add_pad_token_id(ids["[PAD]"])
    w.add_mask_token_id(ids["[MASK]"])
    if pair_format == "roberta":
        w.add_eos_token_id(ids["[SEP]"])
        w.add_add_bos_token(True)
        w.add_add_eos_token(True)
        w.add_add_sep_token(True)
    # numpy shapes are ggml's ne[] reversed
    n_vocab = len(tokens)
    w.add_tensor("token_embd.weight", rnd(n_vocab, n_embd))
    w.add_tensor("token_types.weight", rnd(2, n_embd))
    w.add_tensor("position_embd.weight", rnd(n_ctx_train, n_embd))
    w.add_tensor("token_embd_norm.weight", ones(n_embd))
    w.add_tensor("token_embd_norm.bias", zeros(n_embd))
    for i in range(n_layer):
        block = f"blk.{i}."
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"{block}{name}.weight", rnd(n_embd, n_embd))
            w.add_tensor(f"{block}{name}.bias", zeros(n_embd))
        w.add_tensor(f"{block}attn_output_norm.weight", ones(n_embd))
        w.add_tensor(f"{block}attn_output_norm.bias", zeros(n_embd))
        w.add_tensor(f"{block}ffn_up.weight", rnd(n_ff, n_embd))
        w.add_tensor(f"{block}ffn_up.bias", zeros(n_ff))
        w.add_tensor(f"{block}ffn_down.weight", rnd(n_embd, n_ff))
        w.add_tensor(f"{block}ffn_down.bias", zeros(n_embd))
        w.add_tensor(f"{block}layer_output_norm.weight", ones(n_embd))
        w.add_tensor(f"{block}layer_output_norm.bias", zeros(n_embd))
    # score = cls.output(tanh(cls(h[CLS])))[0]: the raw logit llama.cpp's send_rerank returns
    w.add_tensor("cls.weight", rnd(n_embd, n_embd, std=0.3))
    w.add_tensor("cls.bias", zeros(n_embd))
    w.add_tensor("cls.output.weight", rnd(1, n_embd, std=1.0))
    w.add_tensor("cls.output.bias", zeros(1))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
