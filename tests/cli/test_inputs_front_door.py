"""Input niceties (issue 28): unit forms in did-you-mean, bare sizes, vLLM's --max-model-len, the JSON
error document, and plots whose legends sit outside the data with every series visible."""

from __future__ import annotations

import json

import pytest

from csa_plan.planner.amounts import parse_count
from csa_plan.planner.errors import BadInput
from csa_plan.planner.memory import parse_size


# -- did-you-mean knows the unit forms ------------------------------------------------------------

@pytest.mark.parametrize("text, meant", [("1MiB", "1M"), ("128KiB", "128K"), ("128KB", "128k"), ("2GiB", "2G")])
def test_a_byte_unit_on_a_token_count_suggests_the_count_suffix(text, meant):
    with pytest.raises(BadInput) as err:
        parse_count(text, "options", "--max-seq-len")
    assert f"did you mean {meant!r}" in str(err.value)


def test_a_bare_size_under_a_mebibyte_is_bad_input_naming_both_readings():
    with pytest.raises(BadInput) as err:
        parse_size("141", "options", "--device-memory")
    message = str(err.value)
    assert "--device-memory" in message and "141B" in message and "did you mean 141GB" in message
    assert parse_size("141B", "options", "--device-memory") == 141  # bytes, said explicitly
    assert parse_size("141GB", "options", "--device-memory") == 141 * 10**9
    assert parse_size("0", "options", "--weights") == 0  # zero is zero in every unit
    assert parse_size("2000000", "options", "--device-memory") == 2_000_000  # at least 1 MiB: bytes


def test_a_gpu_name_is_never_corrected_to_another_card():
    try:
        value = parse_size("h20", "options", "--device-memory")  # the H20 card, where the table has it
    except BadInput as exc:
        assert "did you mean 'h200'" not in str(exc), str(exc)
    else:
        assert value != parse_size("h200", "options", "--device-memory")
    with pytest.raises(BadInput, match="did you mean 'h200'"):
        parse_size("H-200x", "options", "--device-memory")  # same card, spelt loosely: offered


@pytest.mark.parametrize("text", ["h2000", "h10", "l4", "a10"])
def test_a_name_with_other_digits_gets_no_card_suggested(text):
    """A model number is not a typo: h10 is not an h100, h2000 not an h200 (--device-memory and --gpu)."""
    from csa_plan.planner.cards import card

    with pytest.raises(BadInput) as err:
        parse_size(text, "options", "--device-memory")
    assert "did you mean" not in str(err.value), str(err.value)
    with pytest.raises(BadInput) as err:
        card(text)
    assert "did you mean" not in str(err.value), str(err.value)


def test_a_gpu_typo_with_the_same_digits_is_still_offered():
    with pytest.raises(BadInput, match="did you mean 'a100-80gb'"):
        parse_size("a100-80g", "options", "--device-memory")


# -- --max-model-len is vLLM's name for --max-seq-len --------------------------------------------

@pytest.mark.parametrize("command", [
    ("check", "deepseek-v4-flash"),
    ("compare", "deepseek-v4-flash"),
    ("simulate", "examples/traces/sample.jsonl", "--model", "deepseek-v4-flash"),
])
def test_max_model_len_is_accepted_as_max_seq_len(csa, command):
    ours = csa(*command, "--max-seq-len", "128K", "--json")
    vllms = csa(*command, "--max-model-len", "128K", "--json")
    assert vllms.code == ours.code and vllms.code in (0, 3), vllms.err
    assert json.loads(vllms.out) == json.loads(ours.out)


# -- --json with bad input prints a JSON error document ------------------------------------------

@pytest.mark.parametrize("args", [
    ("check", "deepseek-v4-pro", "--max-seq-len", "1MiB", "--json"),    # a value click refuses
    ("check", "no-such-model", "--json"),                               # a planner refusal of the input
    ("check", "deepseek-v4-pro", "--json", "--no-such-option"),         # an unknown option
    ("check", "deepseek-v4-pro", "--kv-memory", "1GiB", "--json"),      # an engine setting without --engine
    ("simulate", "examples/traces/sample.jsonl", "--json", "--tp", "x"),
])
def test_json_bad_input_prints_one_json_error_line(csa, args):
    r = csa(*args)
    assert r.code == 2
    lines = r.out.splitlines()
    assert len(lines) == 1, r.out
    doc = json.loads(lines[0])
    assert doc == {"schema": "csa-plan/error/v1", "exit_code": 2, "message": doc["message"]}
    assert r.err.startswith("csa-plan: error: ") and doc["message"] in r.err


def test_without_json_bad_input_prints_nothing_on_stdout(csa):
    r = csa("check", "deepseek-v4-pro", "--max-seq-len", "1MiB")
    assert r.code == 2 and r.out == "" and "did you mean '1M'" in r.err


# -- plots: legends outside the data, every series visible ---------------------------------------

def _overlaps(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_simulate_plot_keeps_legends_off_the_data_and_the_in_flight_line_in_sight():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import numpy as np
    import matplotlib.pyplot as plt

    from csa_plan.cli.plots import simulate_figure

    class Series:  # the case: in flight (10) lands exactly on the limit line at the same height
        edges_ns = np.array([0, 1e9, 2e9, 3e9])
        groups = [((0, 1), np.array([4.0, 10.0, 10.0, 2.0]) * (1 << 30))]
        limit_bytes = 10 * (1 << 30)
        in_flight = np.array([4, 10, 10, 2])

    fig = simulate_figure(Series, "t")
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        axes = fig.axes
        labels = {}
        for ax in axes:
            legend = ax.get_legend()
            if legend is not None:
                box = legend.get_window_extent(renderer)
                for other in axes:
                    assert not _overlaps(box, other.get_window_extent(renderer)), "a legend covers the data"
            for line in ax.get_lines():
                labels[line.get_label()] = ax
                assert line.get_visible() and (line.get_alpha() is None or line.get_alpha() >= 0.8)
        assert {"limit per device", "requests in flight (all devices)"} <= set(labels)
        assert labels["limit per device"] is not labels["requests in flight (all devices)"]
    finally:
        plt.close(fig)


@pytest.mark.parametrize("args", [("compare", "deepseek-v4-flash"), ("sweep", "examples/sweeps/small.yaml", "-j", "1")])
def test_compare_and_sweep_plots_legend_outside_and_plain_tick_labels(csa, tmp_path, monkeypatch, args):
    """Legends beside the axes, not over the data; log-axis labels as plain numbers (never raw mathtext
    such as '$\\mathdefault{10^{4}}$', which is what a log axis prints once input text is kept literal)."""
    pytest.importorskip("matplotlib")
    from csa_plan.cli import plots

    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path, **kw: figures.append(fig))
    r = csa(*args, "--plot", str(tmp_path / "p.png"))
    assert r.code == 0, r.err
    (fig,) = figures
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        legend = ax.get_legend()
        assert legend is not None
        assert not _overlaps(legend.get_window_extent(renderer), ax.get_window_extent(renderer))
        labels = [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels() if t.get_text()]
        assert labels and not any("$" in label or "mathdefault" in label for label in labels), labels
