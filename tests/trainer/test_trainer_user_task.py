"""A task of one's own (trainer/tasks/registry.py, options.py, checks.py): found by `module:factory` or by
the name an installed package gives it, given its options, checked before its first step against the
contract an exact run needs, and trained with every guarantee: the example project (examples/shapes),
installed by pip as its Dockerfile installs it, in a world of two pods that loses a worker and ends
with the uninterrupted run's exact result."""

from __future__ import annotations

import os
import signal

import pytest
import torch
import yaml
from infra_harness import evaluate
from trainer_testing import EXAMPLE, PYTHON, REPO, clean_env, free_port, resumed_lines, run_to_end, uninterrupted_result, worker_pids
from pods_testing import assert_both_ranks_end_with, rank_0_text, two_pods_past_step_16

from trainer.load import read_card
from trainer.tasks.checks import TaskContractError, check_task
from trainer.tasks.options import TaskOptionError, TaskOptions
from trainer.tasks.registry import TaskNotFound, factory_of, installed_tasks, make_user_task
from trainer.throughput import ModelWithLoss
from trainer.train import TASKS, parse_args

# 4096 images of 32 x 32, two pods of batch 32: 64 optimizer steps an epoch, a checkpoint every 8
SHAPES_ARGS = [
    "-m", "trainer.train", "shapes", "--epochs", "3", "--batch", "32", "--lr", "1e-2", "--seed", "7",
    "--checkpoint-every", "8", "--log-every", "8", "--pg-timeout", "60",
    "--task-option", "size=32", "--task-option", "samples=4096", "--task-option", "channels=16",
]  # fmt: skip


def test_an_installed_package_names_its_task_and_the_trainer_finds_it(installed_example, monkeypatch):
    monkeypatch.syspath_prepend(str(installed_example))
    assert installed_tasks()["shapes"] == "shapes.task:make_task"
    assert factory_of("shapes", TASKS).__module__ == "shapes.task"


@pytest.mark.parametrize(
    "reference, error",
    [
        ("nosuch", "task 'nosuch': neither a built-in task (smoke, lm), nor a task an installed package names (entry points ddp_infra.tasks: "),
        ("no_such_module.task:make", "task 'no_such_module.task:make': no module 'no_such_module' to import; install the task's package in the training image"),
        ("task_probe:missing", "task 'task_probe:missing': module 'task_probe' has no 'missing'"),
        ("task_probe:not_callable", "task 'task_probe:not_callable': task_probe:not_callable is a int, not a function that makes a Task"),
    ],
)  # fmt: skip
def test_a_task_that_cannot_be_found_is_refused_naming_where_it_was_looked_for(reference, error):
    with pytest.raises(TaskNotFound) as refused:
        factory_of(reference, TASKS)
    assert str(refused.value).startswith(error), refused.value


def test_task_options_are_read_with_a_type_and_a_default_and_each_one_given_must_be_read(tmp_path):
    options = TaskOptions.parse(["width=16", "label=a=b", "fast=yes"])
    assert (options.get_int("width", 8), options.get_str("label", ""), options.get_bool("fast", False)) == (16, "a=b", True)
    assert options.get_float("rate", 0.5) == 0.5
    for items, error in [
        (["width"], "--task-option 'width': expected KEY=VALUE, such as hidden=64"),
        (["=3"], "--task-option '=3': expected KEY=VALUE"),
        (["width=1", "width=2"], "--task-option width: given twice ('1' and '2'); give it once"),
    ]:
        with pytest.raises(TaskOptionError, match=error.replace("(", r"\(").replace(")", r"\)")):
            TaskOptions.parse(items)
    for reads, error in [
        (lambda o: o.get_int("width", 8, minimum=1), "--task-option width=wide: expected an integer of at least 1"),
        (lambda o: o.get_float("width", 1.0, 0, 1), "--task-option width=wide: expected a number from 0 to 1"),
        (lambda o: o.get_bool("width", True), "--task-option width=wide: expected one of 1, true, yes, on, 0, false, no, off"),
        (lambda o: o.get_str("width", "x", choices=("narrow", "broad")), "--task-option width=wide: expected one of narrow, broad"),
    ]:
        with pytest.raises(TaskOptionError) as refused:
            reads(TaskOptions.parse(["width=wide"]))
        assert str(refused.value) == error
    with pytest.raises(TaskOptionError) as refused:
        make_user_task("task_probe:keeps_the_contract", TASKS, TaskOptions.parse(["widht=4"]), 0, tmp_path)
    assert str(refused.value) == "task task_probe:keeps_the_contract has no option widht (the options it reads: width)"
    with pytest.raises(TypeError, match="task 'task_probe:no_task': its factory returned a dict, not a trainer.tasks.task.Task"):
        make_user_task("task_probe:no_task", TASKS, TaskOptions(), 0, tmp_path)


@pytest.mark.parametrize(
    "factory, error",
    [
        ("noise_from_the_global_rng", "train_set[0] differs between two reads; a sample must depend on its index (and the epoch"),
        ("a_stream", "its train_set is a _Stream, not a map-style dataset (__len__ and __getitem__ by index)"),
        ("samples_of_objects", "train_set[0]: a sample holds a object: samples must be tensors, numbers, strings, arrays"),
    ],
)  # fmt: skip
def test_a_dataset_that_breaks_the_contract_is_refused_before_the_first_step(world_of_one, factory, error, tmp_path):
    task = make_user_task(f"task_probe:{factory}", TASKS, TaskOptions(), 0, tmp_path)
    with pytest.raises(TaskContractError) as refused:
        check_task(task, factory, world_of_one)
    assert str(refused.value).startswith(f"task {factory}: {error}"), refused.value


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "traced by torch.compile"])
def test_a_loss_is_checked_at_its_first_call(world_of_one, compiled, tmp_path):
    # the training step calls the loss inside the module torch.compile traces (ModelWithLoss)
    def first_call(task, batch):
        forward = ModelWithLoss(task.model, task.loss)
        return (torch.compile(forward, backend="eager") if compiled else forward)(batch)

    torch._dynamo.reset()
    kept = check_task(make_user_task("task_probe:keeps_the_contract", TASKS, TaskOptions(), 0, tmp_path), "kept", world_of_one)
    batch = next(iter(torch.utils.data.DataLoader(kept.train_set, 8)))
    loss, count = first_call(kept, batch)
    assert loss.dim() == 0 and count == 8
    broken = check_task(make_user_task("task_probe:a_loss_without_its_count", TASKS, TaskOptions(), 0, tmp_path), "broken", world_of_one)
    with pytest.raises(TaskContractError) as refused:
        first_call(broken, batch)
    assert str(refused.value).startswith("task broken: its loss returned Tensor; it must return (the batch's mean loss"), refused.value


@pytest.mark.timeout(120)
def test_data_that_differs_between_ranks_fails_the_world_at_start_with_the_reason(tmp_path):
    command = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "trainer.train",
               "task_probe:data_from_the_rank", "--out-dir", str(tmp_path), "--device", "cpu"]  # fmt: skip
    env = clean_env(PYTHONPATH=f"{REPO}:{REPO / 'tests' / 'trainer'}")
    code, text = run_to_end(command, env, tmp_path / "ranks.log", timeout=100)
    assert code != 0
    assert "task task_probe:data_from_the_rank: the data differs between ranks (rank 0's and rank 1's lengths or samples)" in text
    assert "[TRAIN]" not in text


@pytest.mark.timeout(300)
def test_the_example_task_survives_a_killed_worker_and_ends_as_an_uninterrupted_run(installed_example, spawn, tmp_path):
    path = {"PYTHONPATH": f"{REPO}:{installed_example}"}
    (tmp_path / "reference").mkdir()
    expected = uninterrupted_result(SHAPES_ARGS, tmp_path / "reference", **path)
    first, second = two_pods_past_step_16(spawn, tmp_path, free_port(), SHAPES_ARGS, **path)
    victims = worker_pids(second.pid)
    assert len(victims) == 1, f"expected one worker under ddp-1's agent, found {victims}"
    os.kill(victims[0], signal.SIGKILL)
    assert first.wait(240) == 0, first.text()
    assert second.wait(60) == 0, second.text()
    resumed = resumed_lines(rank_0_text(first, second))
    assert resumed and int(resumed[-1].split("ckpt-")[1][:8]) >= 16, resumed
    assert_both_ranks_end_with((first, second), expected)
    card = read_card(tmp_path / "run" / "best")
    assert card["task"] == "shapes" and card["task_options"] == {"size": "32", "samples": "4096", "channels": "16"}
    assert card["architecture"] == "shapes.model.ShapeNet" and card["classes"] == ["square", "disc", "cross"]


def test_the_examples_stack_file_deploys_its_image_running_its_task_with_options_the_task_reads(installed_example, monkeypatch):
    document = yaml.safe_load((EXAMPLE / "Pulumi.shapes.yaml").read_text())
    evaluation = evaluate({key.split(":", 1)[1]: value for key, value in document["config"].items()}, stack="shapes")
    assert evaluation.error is None, evaluation.error
    assert evaluation.container["image"] == "ddp-shapes:dev"
    module, *argv = evaluation.container["args"]  # what the entrypoint hands torchrun: -m trainer.train ...
    assert [module, argv[0]] == ["-m", "trainer.train"]
    args = parse_args(argv[1:])
    assert args.task == "shapes" and args.task_option == ["size=32", "channels=16"]
    monkeypatch.syspath_prepend(str(installed_example))
    task = make_user_task(args.task, TASKS, TaskOptions.parse(args.task_option), args.seed, EXAMPLE)
    assert task.train_set[0][0].shape == (1, 32, 32)
