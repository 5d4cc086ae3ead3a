"""The token cache: documents tokenized once into memory-mapped shards, reused, re-prepared on a change, never torn.

The reference is the tokenizer itself, one document at a time, joined with the end-of-document id.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import sys

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from trainer_testing import PYTHON, clean_env, run_to_end
from waiting import wait_for
from transformers import PreTrainedTokenizerFast

from trainer.tasks.lm.documents import DocumentSource, datasets_missing_message, read_paragraphs, read_texts
from trainer.tasks.lm.data import TokenBlocks
from trainer.tasks.lm.tokenizer import ByteTokenizer, HuggingFaceTokenizer
from trainer.tasks.lm.shards import prepare_tokens

WORDS = ["the", "pod", "trains", "a", "model", "on", "text", "and", "writes", "checkpoints", "ünïcode", "日本", "emoji🙂"]


def write_jsonl(path, count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 40))) for _ in range(count)]
    with open(path, "w", encoding="utf-8") as file:
        for text in texts:
            file.write(json.dumps({"text": text, "title": text.title()}) + "\n")
    return texts


def reference(texts, encode, eos_id: int) -> list[int]:
    ids: list[int] = []
    for text in texts:
        ids += encode(text) + [eos_id]
    return ids


def prepare(path, tokenizer, cache, field: str = "text"):
    return prepare_tokens(DocumentSource(path, field, "--train-file"), tokenizer, cache, wait_seconds=30)


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "train.jsonl"
    return path, write_jsonl(path, 300)


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory):
    """A byte-level BPE tokenizer trained on the word list, saved as transformers saves it."""
    directory = tmp_path_factory.mktemp("bpe")
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator([" ".join(WORDS)] * 20, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    ))  # fmt: skip
    PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>").save_pretrained(directory)
    return directory


def test_byte_shard_holds_the_reference_tokens_as_uint16(corpus, tmp_path):
    path, texts = corpus
    shard, prepared = prepare(path, ByteTokenizer(), tmp_path / "cache")
    tokens = shard.open()
    assert prepared and isinstance(tokens, np.memmap) and tokens.dtype == np.uint16
    assert tokens.tolist() == reference(texts, ByteTokenizer().encode, ByteTokenizer.eos_id)


def test_hugging_face_shard_holds_the_tokenizers_own_ids(corpus, tmp_path, bpe_dir):
    path, texts = corpus
    hf = PreTrainedTokenizerFast.from_pretrained(bpe_dir, local_files_only=True)
    shard, _ = prepare(path, HuggingFaceTokenizer(hf), tmp_path / "cache")
    assert shard.open().tolist() == reference(texts, lambda t: hf(t)["input_ids"], hf.eos_token_id)


def test_a_vocabulary_beyond_uint16_gets_uint32(corpus, tmp_path):
    class Wide:  # ids above 65535, as a 100k-vocabulary tokenizer gives
        vocab_size, eos_id, identity = 100_000, 99_999, "wide"

        def encode_batch(self, texts):
            return np.array([70_000 + len(t) for t in texts for _ in (0, 1)], dtype=np.int64)

    shard, _ = prepare(corpus[0], Wide(), tmp_path / "cache")
    assert shard.open().dtype == np.uint32 and shard.open()[0] == 70_000 + len(corpus[1][0])


def test_plain_text_documents_are_separated_by_blank_lines(tmp_path):
    path = tmp_path / "book.txt"
    path.write_text("Chapter one.\nIt began.\n\n\n  \nChapter two.\n\nThe end.\n", encoding="utf-8")
    assert list(read_paragraphs(path)) == ["Chapter one.\nIt began.", "Chapter two.", "The end."]
    shard, _ = prepare(path, ByteTokenizer(), tmp_path / "cache")
    assert shard.open().tolist() == reference(read_paragraphs(path), ByteTokenizer().encode, 256)


def test_a_second_run_reuses_the_shard_without_rewriting_it(corpus, tmp_path):
    first, prepared = prepare(corpus[0], ByteTokenizer(), tmp_path / "cache")
    before = first.tokens_path.stat()
    second, prepared_again = prepare(corpus[0], ByteTokenizer(), tmp_path / "cache")
    after = second.tokens_path.stat()
    assert prepared and not prepared_again and second == first
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_changed_input_or_tokenizer_is_prepared_again(corpus, tmp_path, bpe_dir):
    path, texts = corpus
    byte_shard, _ = prepare(path, ByteTokenizer(), tmp_path / "cache")
    hf = HuggingFaceTokenizer(PreTrainedTokenizerFast.from_pretrained(bpe_dir, local_files_only=True))
    bpe_shard, prepared = prepare(path, hf, tmp_path / "cache")
    assert prepared and bpe_shard != byte_shard

    with open(path, "a", encoding="utf-8") as file:
        file.write(json.dumps({"text": "one more document", "title": "One"}) + "\n")
    changed, prepared = prepare(path, ByteTokenizer(), tmp_path / "cache")
    assert prepared and changed != byte_shard
    assert changed.open().tolist() == reference([*texts, "one more document"], ByteTokenizer().encode, 256)

    other_field, prepared = prepare(path, ByteTokenizer(), tmp_path / "cache", field="title")
    assert prepared and other_field != changed


def test_a_temp_file_or_ids_without_their_marker_are_never_read(corpus, tmp_path):
    path, texts = corpus
    good, _ = prepare(path, ByteTokenizer(), tmp_path / "good")
    expected = good.open().tolist()
    # What a crash leaves: ids cut short with no marker, and a temp file of a dead preparer.
    cache = tmp_path / "torn"
    cache.mkdir()
    torn = type(good)(cache, good.stem)
    torn.tokens_path.write_bytes(good.tokens_path.read_bytes()[:100])
    leftover = cache / f"{good.stem}.tokens.tmp-999999"
    leftover.write_bytes(b"\0" * 64)
    assert torn.marker() is None
    with pytest.raises(FileNotFoundError):
        torn.open()
    shard, prepared = prepare(path, ByteTokenizer(), cache)
    assert prepared and shard.open().tolist() == expected
    assert not leftover.exists()

    # A marker whose ids were truncated afterwards does not count either.
    with open(shard.tokens_path, "r+b") as file:
        file.truncate(10)
    assert shard.marker() is None
    assert prepare(path, ByteTokenizer(), cache)[1]


def prepare_command(data_dir, cache, train="train.jsonl", val="train.jsonl") -> list[str]:
    return [PYTHON, "-m", "trainer.prepare", "--data-dir", str(data_dir), "--train-file", train, "--val-file", val,
            "--token-cache-dir", str(cache)]  # fmt: skip


@pytest.mark.timeout(120)
def test_a_prepare_killed_mid_write_leaves_nothing_that_looks_complete(spawn, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    texts = write_jsonl(data / "train.jsonl", 200_000)  # about 20 MB: long enough to be caught writing
    cache = tmp_path / "cache"
    proc = spawn(prepare_command(data, cache), clean_env(), "killed")
    wait_for(lambda: any(p.stat().st_size > 0 for p in cache.glob("*.tmp-*")), 60, "a temp file being written",
             interval=0.005, gone=proc.ended, not_yet=(FileNotFoundError,))  # fmt: skip
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    assert not list(cache.glob("*.json")), "a killed prepare left a finished marker"

    code, text = run_to_end(prepare_command(data, cache), clean_env(), tmp_path / "again.log", timeout=60)
    assert code == 0, text
    assert "prepared" in text and not list(cache.glob("*.tmp-*"))
    [marker] = [json.loads(p.read_text()) for p in cache.glob("*.json")]
    [tokens] = cache.glob("*.tokens")
    ids = np.fromfile(tokens, dtype=marker["dtype"])
    assert ids.tolist() == reference(texts, ByteTokenizer().encode, 256)


READ_AND_HASH = """
import hashlib, sys
from pathlib import Path
from trainer.tasks.lm.documents import DocumentSource
from trainer.tasks.lm.tokenizer import ByteTokenizer
from trainer.tasks.lm.shards import prepare_tokens
shard, prepared = prepare_tokens(DocumentSource(Path(sys.argv[1]), "text", "--train-file"), ByteTokenizer(), Path(sys.argv[2]), 60)
print("prepared" if prepared else "reused", hashlib.sha256(shard.open()).hexdigest(), flush=True)
"""


@pytest.mark.timeout(120)
def test_two_processes_preparing_at_once_make_one_shard_and_read_the_same(spawn, tmp_path):
    texts = write_jsonl(tmp_path / "train.jsonl", 50_000)
    cache = tmp_path / "cache"
    command = [PYTHON, "-c", READ_AND_HASH, str(tmp_path / "train.jsonl"), str(cache)]
    procs = [spawn(command, clean_env(), f"prepare-{index}") for index in range(2)]
    codes = [proc.wait(90) for proc in procs]
    outputs = [proc.text().splitlines()[-1].split() for proc in procs]  # after any "waiting" line
    assert codes == [0, 0], [proc.text() for proc in procs]
    assert sorted(verdict for verdict, _ in outputs) == ["prepared", "reused"]
    expected = np.array(reference(texts, ByteTokenizer().encode, 256), dtype=np.uint16)
    assert {digest for _, digest in outputs} == {hashlib.sha256(expected).hexdigest()}
    assert len(list(cache.glob("*.tokens"))) == 1 and not list(cache.glob("*.tmp-*"))


def test_training_blocks_are_read_from_the_memory_map(corpus, tmp_path):
    path, texts = corpus
    shard, _ = prepare(path, ByteTokenizer(), tmp_path / "cache")
    blocks = TokenBlocks(shard, seq_len=32)
    ids = reference(texts, ByteTokenizer().encode, 256)
    assert isinstance(blocks.tokens, np.memmap)
    assert len(blocks) == len(ids) // 33
    assert blocks[3].dtype == torch.int64 and blocks[3].tolist() == ids[99:132]
    with pytest.raises(IndexError):
        blocks[len(blocks)]
    # a DataLoader worker started by spawn maps the shard again rather than receiving the ids
    import pickle

    copy = pickle.loads(pickle.dumps(blocks))
    assert isinstance(copy.tokens, np.memmap) and len(pickle.dumps(blocks)) < 1000
    assert copy[3].tolist() == ids[99:132]


def test_an_unwritable_cache_is_named_with_its_flag(corpus, tmp_path):
    (tmp_path / "a-file").write_text("")
    with pytest.raises(SystemExit, match=r"--token-cache-dir .*a-file/cache: cannot write the token cache there"):
        prepare(corpus[0], ByteTokenizer(), tmp_path / "a-file" / "cache")


def test_an_unknown_kind_of_file_is_named_with_its_flag_and_what_is_allowed(tmp_path):
    (tmp_path / "corpus.csv").write_text("text\nhello\n")
    with pytest.raises(SystemExit, match=r"--train-file .*corpus.csv: unknown kind of file; allowed: .jsonl, .json, .txt"):
        prepare(tmp_path / "corpus.csv", ByteTokenizer(), tmp_path / "cache")


def test_a_dataset_directory_without_the_datasets_package_names_the_flag(tmp_path, monkeypatch):
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "state.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if not installed, whether it is or not
    with pytest.raises(SystemExit) as raised:
        prepare(tmp_path / "train", ByteTokenizer(), tmp_path / "cache")
    assert str(raised.value) == datasets_missing_message("--train-file", tmp_path / "train")
    assert "--train-file" in str(raised.value) and "pip install datasets" in str(raised.value)


def test_a_saved_hugging_face_dataset_is_read_by_its_text_column(tmp_path):
    try:
        import datasets
    except ImportError:
        pytest.skip(datasets_missing_message("--train-file", tmp_path / "train"))
    texts = [f"document {i} ünïcode" for i in range(50)]
    datasets.Dataset.from_dict({"text": texts, "n": list(range(50))}).save_to_disk(str(tmp_path / "train"))
    shard, _ = prepare(tmp_path / "train", ByteTokenizer(), tmp_path / "cache")
    assert shard.open().tolist() == reference(texts, ByteTokenizer().encode, 256)


def test_jsonl_without_the_text_field_says_where_and_which_field(tmp_path):
    (tmp_path / "train.jsonl").write_text('{"text": "ok"}\n{"body": "no text"}\n')
    with pytest.raises(ValueError, match=r"train.jsonl:2: expected a JSON object with a 'text' string"):
        list(read_texts(tmp_path / "train.jsonl", "text"))
