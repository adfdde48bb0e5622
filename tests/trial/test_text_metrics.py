"""Metrics read from a script's text: patterns with named groups, and key=value scalars."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from hpsearch.trial.text_metrics import TextMetrics, TextReader, naming_lines, pattern_for

MNIST = (
    r"Test set: Average loss: (?P<val_loss>[\d.]+), Accuracy: \d+/\d+ \((?P<val_accuracy>[\d.]+)%\)"
)
"""The line PyTorch's MNIST example prints after each epoch."""


def test_a_pattern_reads_the_mnist_examples_line_its_step_the_count_of_matches() -> None:
    reader = TextReader(TextMetrics(patterns=[MNIST]))

    assert reader.read("Train Epoch: 1 [0/60000 (0%)]\tLoss: 2.300") is None
    first = reader.read("Test set: Average loss: 0.0339, Accuracy: 9890/10000 (99%)")
    second = reader.read("Test set: Average loss: 0.0301, Accuracy: 9903/10000 (99.03%)")

    assert first == (0, {"val_loss": 0.0339, "val_accuracy": 99.0})
    assert second == (1, {"val_loss": 0.0301, "val_accuracy": 99.03})
    assert reader.never_matched() == []


def test_a_step_group_gives_the_step_and_is_no_metric() -> None:
    reader = TextReader(TextMetrics(patterns=[r"epoch (?P<step>\d+): acc (?P<acc>[\d.]+)"]))
    assert reader.read("epoch 7: acc 0.91") == (7, {"acc": 0.91})


def test_scalars_read_key_value_pairs_and_a_named_step() -> None:
    reader = TextReader(TextMetrics(scalars=True, step="epoch"))

    assert reader.read("epoch=3 loss=0.25 lr: 1e-3 acc: 91.5%") == (
        3,
        {"loss": 0.25, "lr": 0.001, "acc": 91.5},
    )
    assert reader.read("loading data from /data/v1.2 on 2026-11-24") is None
    assert reader.read("loss: 0.2") == (0, {"loss": 0.2})  # no step: the count of such lines


def test_scalars_read_a_printed_dict_as_hugging_faces_trainer_logs() -> None:
    reader = TextReader(TextMetrics(scalars=True))
    train = "{'loss': 0.6931, 'grad_norm': 1.23, 'learning_rate': 4.5e-05, 'epoch': 0.5}"
    assert reader.read(train) == (
        0,
        {"loss": 0.6931, "grad_norm": 1.23, "learning_rate": 4.5e-05, "epoch": 0.5},
    )
    evaluated = '{"eval_loss": 0.65, "eval_accuracy": 0.61, "epoch": 1.0}'  # double quotes too
    assert reader.read(evaluated) == (1, {"eval_loss": 0.65, "eval_accuracy": 0.61, "epoch": 1.0})
    assert reader.read("{'model': 'bert-base', 'revision': '3.1'}") is None  # no numbers


def test_scalars_leave_times_counts_and_dates_out_and_take_a_sentences_last_number() -> None:
    # torchvision's reference scripts log so: eta is a time, [10/100] a count.
    reader = TextReader(TextMetrics(scalars=True))
    line = "Epoch: [3]  [ 10/100]  eta: 0:00:05  lr: 0.100000  loss: 2.3026 (2.3026)"
    assert reader.read(line) == (0, {"lr": 0.1, "loss": 2.3026})
    assert reader.read("date: 2026-11-29 step=10/100 acc: 0.7") == (1, {"acc": 0.7})
    assert reader.read("Test accuracy: 0.91.") == (2, {"accuracy": 0.91})


LIGHTNING_TEST_RESULTS = """\
┏━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━┓
┃        Test metric        ┃       DataLoader 0        ┃
┡━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━┩
│         test_acc          │    0.9200000166893005     │
│         test/loss         │    0.2345000058412552     │
└───────────────────────────┴───────────────────────────┘
────────────────────────────────────────────────────────────
      Validate metric           DataLoader 0
────────────────────────────────────────────────────────────
         val_acc             0.9100000262260437
────────────────────────────────────────────────────────────
"""
"""What Lightning's ``trainer.test`` prints drawn by ``rich``, then ``trainer.validate``'s
as plain text (without ``rich``)."""


def test_scalars_read_the_name_and_number_rows_of_lightnings_results_as_one_report() -> None:
    reader = TextReader(TextMetrics(scalars=True))
    reports = [r for r in map(reader.read, LIGHTNING_TEST_RESULTS.splitlines()) if r]
    assert reports == [
        (0, {"test_acc": 0.9200000166893005}),
        (0, {"test/loss": 0.2345000058412552}),  # the same table: the same step
        (1, {"val_acc": 0.9100000262260437}),
    ]


def test_scalars_read_rows_of_numbers_under_a_header_of_names_as_fastai_prints_epochs() -> None:
    reader = TextReader(TextMetrics(scalars=True, step="epoch"))
    lines = [
        "epoch     train_loss  valid_loss  accuracy  time    ",
        "0         0.324575    0.209016    0.935000  00:05     ",
        "Better model found at epoch 0 with valid_loss value: 0.209016.",
        "1         0.162031    0.057349    #na#      00:05     ",
        "              precision    recall  f1-score   support",  # another table's header
        "           0       0.95      0.93      0.94       100",  # a row it does not fit
        "    accuracy                           0.94       300",
        "   a    b",  # two names: words as often as not, no header
        "0  1  2.0",
    ]
    assert [reader.read(line) for line in lines] == [
        None,
        (0, {"train_loss": 0.324575, "valid_loss": 0.209016, "accuracy": 0.935}),
        (0, {"value": 0.209016}),
        (1, {"train_loss": 0.162031, "valid_loss": 0.057349}),  # a missing cell left out
        None,
        None,
        (1, {"accuracy": 0.94}),  # sklearn's classification report: a name and its number
        None,
        None,
    ]


def test_scalars_read_timms_top_1_accuracy_by_its_name() -> None:
    reader = TextReader(TextMetrics(scalars=True))
    line = "Test: [  10/10]  Time: 0.525 (0.525)  Loss:  0.4123 (0.4000)  Acc@1: 90.0000 (89.5)"
    assert reader.read(line) == (0, {"Time": 0.525, "Loss": 0.4123, "Acc@1": 90.0})


def test_lines_without_a_step_are_counted_apart_from_those_with_one() -> None:
    # A script's epoch lines carry the step; its progress bar's lines do not, and
    # reach the reader before or after them as stdout's and stderr's threads go.
    reader = TextReader(TextMetrics(scalars=True, step="epoch"))
    read = [
        reader.read("epoch=0 val_loss=0.9"),
        reader.read("train: 100%|##########| 40/40 [00:01<00:00, loss=0.8]"),
        reader.read("train: 100%|##########| 40/40 [00:01<00:00, loss=0.6]"),
        reader.read("epoch=1 val_loss=0.7"),
        reader.read("train: 100%|##########| 40/40 [00:01<00:00, loss=0.5]"),
    ]
    assert read == [
        (0, {"val_loss": 0.9}),
        (0, {"loss": 0.8}),
        (1, {"loss": 0.6}),
        (1, {"val_loss": 0.7}),
        (2, {"loss": 0.5}),
    ]


def test_a_line_a_progress_bar_redrew_is_read_as_its_last_drawing() -> None:
    # tqdm redraws with carriage returns: one line holds every drawing, the first first.
    bar = "".join(
        f"\rEpoch 0: {p:3d}%|          | {p}/100 [00:0{p // 50}<00:01, loss={1 - p / 200:.3f}]"
        for p in (1, 50, 100)
    )
    patterns = TextReader(TextMetrics(patterns=[r"loss=(?P<loss>[\d.]+)"]))
    scalars = TextReader(TextMetrics(scalars=True))
    assert patterns.read(bar + "\n") == (0, {"loss": 0.5})
    assert scalars.read(bar + "\r\n") == (0, {"loss": 0.5})
    assert patterns.read("\r\r\n") is None


def test_a_pattern_that_never_matched_is_named() -> None:
    reader = TextReader(TextMetrics(patterns=[MNIST, r"speed (?P<samples_per_sec>\d+)"]))
    reader.read("speed 1200 samples/s")
    assert reader.never_matched() == [f"train.metrics.patterns[0] {MNIST!r}"]


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"patterns": ["acc (\\d+"]}, "is not a regular expression"),
        ({"patterns": [r"acc (\d+)"]}, "names no metric; name a group"),
        ({}, "give patterns, or scalars: true"),
    ],
)
def test_bad_patterns_are_refused_with_the_fix(fields: dict[str, object], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        TextMetrics.model_validate(fields)


MNIST_OUTPUT = """Train Epoch: 1 [0/60000 (0%)]\tLoss: 2.305
Test set: Average loss: 0.0472, Accuracy: 9842/10000 (98%)
Train Epoch: 2 [0/60000 (0%)]\tLoss: 0.212
Test set: Average loss: 0.0339, Accuracy: 9890/10000 (99%)
"""
"""PyTorch's MNIST example's output, which names its accuracy with a count and a percent."""


def test_a_metric_named_with_more_than_a_number_is_found_and_a_pattern_reads_it() -> None:
    named = naming_lines(MNIST_OUTPUT, ["Accuracy", "acc", "Average"])
    assert named == {"Accuracy": "Test set: Average loss: 0.0339, Accuracy: 9890/10000 (99%)"}
    # The pattern made from the line reads its percent, as train.metrics.patterns reads it.
    pattern = pattern_for(named["Accuracy"], "Accuracy")
    assert pattern == r"Accuracy: [\d.]+/[\d.]+ \((?P<Accuracy>[\d.]+)"
    reader = TextReader(TextMetrics(patterns=[pattern]))
    read = [reader.read(line) for line in MNIST_OUTPUT.splitlines()]
    assert [r[1] for r in read if r is not None] == [{"Accuracy": 98.0}, {"Accuracy": 99.0}]
    # A line of megabytes (a progress bar never ended) gives what is around the name.
    long = naming_lines("x" * 10_000_000 + " Accuracy: 98/100 (98%) " + "y" * 1000, ["Accuracy"])
    assert long["Accuracy"].startswith("x" * 79 + " Accuracy: 98/100 (98%) yyy")
    assert len(long["Accuracy"]) < 500
    assert pattern_for(long["Accuracy"], "Accuracy") == pattern
    # No percent: its first number.
    assert pattern_for("acc's value: 0.91 (best 0.93)", "value") == r"value: (?P<value>[\d.]+)"
    assert pattern_for("top-1 acc=76.1 (±0.2) after 90 epochs", "acc") == r"acc=(?P<acc>[\d.]+)"
    # A name a group cannot have, or no number after the name: no pattern.
    assert pattern_for("val/acc: 9842/10000", "val/acc") is None
    assert pattern_for("accuracy: n/a", "accuracy") is None
