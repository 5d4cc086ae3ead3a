"""`lm --model-local-dir`: a Hugging Face causal LM from a local directory, trained offline with DDP;
`lm --model-id --allow-download`: the same model fetched from a Hub, with the token the stack mounts.

The model directory is built here (a 1-layer GPT-2 and a byte-level BPE tokenizer trained on the
test corpus), so nothing is downloaded from the internet: the "Hub" is a local HTTP server serving
that directory (HF_ENDPOINT). The runs get a guard that refuses, and reports, any host other than
loopback that Python resolves or connects to.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import math
import shutil
import threading
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from trainer_testing import (
    PYTHON, clean_env, done_lines, entrypoint_command, epoch_records, free_port, pod_env, run_to_end, same_result, train_lines,
    write_corpus,
)  # fmt: skip
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from trainer.tasks.lm.documents import read_texts

EOS = "<|endoftext|>"

NETWORK_GUARD = """
import sys

def refuse_remote_hosts(event, args):
    if event == "socket.getaddrinfo":
        host = args[0]
    elif event == "socket.connect" and isinstance(args[1], tuple):
        host = args[1][0]
    else:
        return
    if host not in (None, "127.0.0.1", "::1", "localhost"):
        print(f"[NETWORK] {event} {host!r}", file=sys.stderr, flush=True)
        raise OSError(f"no network in this test: {host!r}")

sys.addaudithook(refuse_remote_hosts)
"""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    write_corpus(root / "data")
    (root / "guard").mkdir()
    (root / "guard" / "sitecustomize.py").write_text(NETWORK_GUARD)
    return root


@pytest.fixture(scope="module")
def model_dir(workspace):
    """A tiny GPT-2 saved in bf16, as published checkpoints mostly are, with its tokenizer. GPT-2's dropout
    stays on, so a resumed run equals an uninterrupted one only if the RNG is restored to the step."""
    directory = workspace / "models" / "tiny-gpt2"
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe_trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=[EOS], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    bpe.train_from_iterator(read_texts(workspace / "data" / "train.jsonl", "text"), bpe_trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=EOS)
    tokenizer.save_pretrained(directory)
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=1, n_head=2,
        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    GPT2LMHeadModel(config).to(torch.bfloat16).save_pretrained(directory)
    return directory


def lm_args(workspace, model_dir) -> list[str]:
    return [
        "-m", "trainer.train", "lm", "--model-local-dir", str(model_dir), "--data-dir", str(workspace / "data"),
        "--epochs", "2", "--batch", "4", "--seq-len", "32", "--lr", "3e-3", "--warmup-steps", "2", "--log-every", "5",
        "--checkpoint-every", "4", "--keep-checkpoints", "20",
    ]  # fmt: skip


def offline_env(workspace, **extra: str) -> dict[str, str]:
    env = clean_env(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(workspace / "hf-home"))
    env["PYTHONPATH"] = f"{workspace / 'guard'}:{env['PYTHONPATH']}"
    env.update(extra)
    return env


def train_in_a_world_of_two(workspace, model_dir, out_dir, log) -> tuple[dict[str, str], str]:
    env = offline_env(workspace, **pod_env("hf-0", free_port(), nnodes=1, nproc=2, run_name="hf"), OUT_DIR=str(out_dir))
    code, text = run_to_end(entrypoint_command(lm_args(workspace, model_dir)), env, log, timeout=90)
    assert code == 0, text[-4000:]
    assert "[NETWORK]" not in text, text[-4000:]
    lines = done_lines(text)
    assert len(lines) == 2 and same_result(lines[0]) == same_result(lines[1]), "replicas diverged"
    return same_result(lines[0]), text


@pytest.fixture(scope="module")
def finished_run(workspace, model_dir):
    out = workspace / "out"
    result, text = train_in_a_world_of_two(workspace, model_dir, out, workspace / "first.log")
    return out / "hf", result, text


def metrics_of(run) -> list[dict]:
    return epoch_records(run)


@pytest.mark.timeout(120)
def test_trains_offline_in_a_world_of_two_and_writes_hugging_face_epochs(finished_run, model_dir):
    run, result, text = finished_run
    assert all("tokens/s" in line for line in train_lines(text))
    records = metrics_of(run)
    assert [r["epoch"] for r in records] == [1, 2]
    vocab_size = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    assert records[-1]["val_loss"] < records[0]["val_loss"] < math.log(vocab_size)  # learns beyond a uniform guess
    for record in records:
        assert record["val_ppl"] == pytest.approx(math.exp(record["val_loss"]))
        assert json.loads((run / f"epoch-{record['epoch']}" / "metrics.json").read_text()) == record
    best = min(records, key=lambda r: r["val_loss"])
    assert (run / "best").resolve() == (run / f"epoch-{best['epoch']}").resolve()
    assert result["best"] == f"epoch-{best['epoch']}"

    # the last epoch is the trained model, loadable offline, in fp32 although it came in bf16
    trained = AutoModelForCausalLM.from_pretrained(run / "epoch-2", local_files_only=True)
    assert {p.dtype for p in trained.parameters()} == {torch.float32}
    assert sum(p.detach().double().sum() for p in trained.parameters()).item() == pytest.approx(float(result["params_sum"]))
    tokenizer = AutoTokenizer.from_pretrained(run / "epoch-2", local_files_only=True)
    assert tokenizer.eos_token == EOS


@pytest.mark.timeout(120)
def test_a_crash_after_a_checkpoint_resumes_and_ends_as_the_uninterrupted_run(finished_run, workspace, model_dir, tmp_path):
    run, expected, _ = finished_run
    crashed = tmp_path / "hf"
    (crashed / "checkpoints").mkdir(parents=True)
    for path in (run / "checkpoints").glob("ckpt-*"):
        if int(path.name[5:13]) <= 8:  # what the run had written when it died, after step 8, mid-epoch 1
            copy = shutil.copytree if path.is_dir() else shutil.copy2
            copy(path, crashed / "checkpoints" / path.name)

    result, text = train_in_a_world_of_two(workspace, model_dir, tmp_path, tmp_path / "resumed.log")
    assert "[CKPT] resumed from ckpt-00000008: epoch 1 step 8/" in text
    assert result == expected
    timing = ("tokens_per_s", "seconds")
    assert [{k: v for k, v in r.items() if k not in timing} for r in metrics_of(crashed)] == [
        {k: v for k, v in r.items() if k not in timing} for r in metrics_of(run)
    ]
    assert (crashed / "best").resolve() == (crashed / expected["best"]).resolve()
    assert (crashed / "epoch-2" / "model.safetensors").is_file()


def fail_to_start(workspace, tmp_path, model_dir, **env: str) -> str:
    """A world of one process: it must refuse the model directory before training."""
    command = [PYTHON, *lm_args(workspace, model_dir), "--out-dir", str(tmp_path)]
    code, text = run_to_end(command, offline_env(workspace, **env), tmp_path / "refused.log", timeout=60)
    assert code == 1, text[-4000:]
    assert "Traceback" not in text and "[TRAIN]" not in text, text[-4000:]
    return text


@pytest.mark.timeout(60)
def test_a_missing_model_directory_is_named_with_its_flag(workspace, tmp_path):
    missing = tmp_path / "models" / "nowhere"
    text = fail_to_start(workspace, tmp_path, missing)
    assert f"--model-local-dir {missing}: no such directory" in text


@pytest.mark.timeout(60)
def test_a_directory_that_is_not_a_model_is_named_with_its_flag(workspace, tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.md").write_text("not a model\n")
    text = fail_to_start(workspace, tmp_path, tmp_path / "notes")
    assert f"--model-local-dir {tmp_path / 'notes'}: not a Hugging Face directory" in text


@pytest.mark.timeout(60)
def test_without_transformers_the_flag_says_to_install_it(workspace, model_dir, tmp_path):
    hidden = tmp_path / "no-transformers"
    (hidden / "transformers").mkdir(parents=True)
    (hidden / "transformers" / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'transformers'\")\n")
    text = fail_to_start(workspace, tmp_path, model_dir, PYTHONPATH=f"{hidden}:{offline_env(workspace)['PYTHONPATH']}")
    assert "--model-local-dir needs the transformers package, which is not installed: pip install transformers" in text


class FakeHub:
    """The Hugging Face Hub's file endpoints for one repository, served from a local directory; records
    every request with its Authorization header."""

    COMMIT = "0123456789abcdef0123456789abcdef01234567"

    def __init__(self, repo_id: str, directory: Path):
        self.requests: list[tuple[str, str, str | None]] = []
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                self.answer(send_body=False)

            def do_GET(self):
                self.answer(send_body=True)

            def answer(self, send_body: bool):
                hub.requests.append((self.command, self.path, self.headers.get("Authorization")))
                prefix = f"/{repo_id}/resolve/"
                path = self.path.split("?")[0]
                file = directory / path[len(prefix) :].split("/", 1)[-1] if path.startswith(prefix) else None
                if file is None or not file.is_file():
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                data = file.read_bytes()
                self.send_response(200)
                self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
                self.send_header("X-Repo-Commit", FakeHub.COMMIT)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if send_body:
                    self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def downloads(self) -> list[tuple[str, str | None]]:
        """(file, Authorization header) of each file fetched."""
        return [(path.rsplit("/", 1)[-1], auth) for method, path, auth in self.requests if method == "GET" and "/resolve/" in path]


@pytest.fixture
def hub(model_dir):
    served = FakeHub("acme/tiny-gpt2", model_dir)
    yield served
    served.server.shutdown()


def one_epoch_args(workspace, *model_flags: str) -> list[str]:
    return [
        "-m", "trainer.train", "lm", *model_flags, "--data-dir", str(workspace / "data"),
        "--epochs", "1", "--batch", "4", "--seq-len", "32", "--lr", "3e-3", "--log-every", "5",
    ]  # fmt: skip


def guarded_env(workspace, **extra: str) -> dict[str, str]:
    """No offline variables: the flags alone decide."""
    env = clean_env(**{"HF_HOME": str(workspace / "hf-home"), **extra})
    env["PYTHONPATH"] = f"{workspace / 'guard'}:{env['PYTHONPATH']}"
    return env


@pytest.mark.timeout(120)
def test_seed_001s_flags_train_offline_in_a_world_of_two(workspace, model_dir, hub, tmp_path):
    flags = ["--model-local-dir", str(model_dir), "--tokenizer-local-dir", str(model_dir), "--local-files-only"]
    env = guarded_env(workspace, **pod_env("seed-0", free_port(), nnodes=1, nproc=2, run_name="seed"), OUT_DIR=str(tmp_path),
                      HF_ENDPOINT=hub.url)  # fmt: skip
    code, text = run_to_end(entrypoint_command(one_epoch_args(workspace, *flags)), env, tmp_path / "seed.log", timeout=100)
    assert code == 0, text[-4000:]
    assert "[NETWORK]" not in text and hub.requests == [], "offline: nothing is asked of any hub"
    lines = done_lines(text)
    assert len(lines) == 2 and same_result(lines[0]) == same_result(lines[1]), "replicas diverged"
    assert AutoModelForCausalLM.from_pretrained(tmp_path / "seed" / "epoch-1", local_files_only=True)


@pytest.mark.timeout(120)
def test_allow_download_fetches_a_model_id_with_the_mounted_token_in_a_world_of_two(workspace, hub, tmp_path):
    # the image's offline variables are set, as in a pod: --allow-download lifts them for the process
    env = guarded_env(workspace, **pod_env("dl-0", free_port(), nnodes=1, nproc=2, run_name="dl"), OUT_DIR=str(tmp_path),
                      HF_ENDPOINT=hub.url, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_TOKEN="hf_mounted",
                      HF_HOME=str(tmp_path / "hf-home"))  # fmt: skip
    args = one_epoch_args(workspace, "--model-id", "acme/tiny-gpt2", "--allow-download")
    code, text = run_to_end(entrypoint_command(args), env, tmp_path / "download.log", timeout=100)
    assert code == 0, text[-4000:]
    assert "[NETWORK]" not in text
    fetched = hub.downloads()
    assert {"config.json", "tokenizer.json", "model.safetensors"} <= {name for name, _ in fetched}
    assert {auth for _, auth in fetched} == {"Bearer hf_mounted"}
    lines = done_lines(text)
    assert len(lines) == 2 and same_result(lines[0]) == same_result(lines[1]), "replicas diverged"


@pytest.mark.timeout(60)
def test_a_model_id_is_not_downloaded_by_default_and_the_message_says_how(workspace, hub, tmp_path):
    command = [PYTHON, *one_epoch_args(workspace, "--model-id", "acme/tiny-gpt2"), "--out-dir", str(tmp_path)]
    env = guarded_env(workspace, HF_ENDPOINT=hub.url, HF_TOKEN="hf_mounted", HF_HOME=str(tmp_path / "empty-cache"))
    code, text = run_to_end(command, env, tmp_path / "offline.log", timeout=60)
    assert code == 1 and "Traceback" not in text, text[-4000:]
    assert "--model-id acme/tiny-gpt2: not in the Hugging Face cache" in text
    assert "add --allow-download to fetch it" in text
    assert hub.requests == []


@pytest.mark.timeout(90)
def test_a_tokenizer_alone_gives_the_small_gpt_its_vocabulary(workspace, model_dir, tmp_path):
    args = ["-m", "trainer.train", "lm", "--tokenizer-local-dir", str(model_dir), "--data-dir", str(workspace / "data"),
            "--token-cache-dir", str(tmp_path / "cache"), "--epochs", "1", "--batch", "4", "--seq-len", "32",
            "--d-model", "32", "--n-layer", "1", "--n-head", "2", "--out-dir", str(tmp_path)]  # fmt: skip
    code, text = run_to_end([PYTHON, *args], guarded_env(workspace), tmp_path / "tokenizer.log", timeout=80)
    assert code == 0, text[-4000:]
    assert text.count("[DATA]") == 2 and "[NETWORK]" not in text
    vocab_size = len(AutoTokenizer.from_pretrained(model_dir, local_files_only=True))
    state = torch.load(tmp_path / "local" / "epoch-1" / "model.pt")
    card = json.loads((tmp_path / "local" / "epoch-1" / "model.json").read_text())
    assert card["config"]["vocab_size"] == vocab_size != 257
    assert state["tokens.weight"].shape[0] == -(-vocab_size // 64) * 64, "embedding rows padded to a multiple of 64"
