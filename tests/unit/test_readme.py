"""The documentation says what the code does, and what perf/results measured.

README.md is the front page (the two commands and the diagram on its first screen, a link to
every page); docs/ holds the rest. Checked here: every gateway setting, flag, variable and
default; every protocol-v1 error code, format, sample rate and frame duration; every HTTP
response format; each Triton model's tensors, with the contract's types, defaults and
ranges; every metric; the benchmark tables against the files they were copied from; and
every relative link and anchor."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from contract import models as m
from gateway import settings as s
from speechstream import protocol as p
from speechstream.media.containers import CONTENT_TYPES

ROOT = Path(__file__).parents[2]
DOCS = ROOT / "docs"
RESULTS = ROOT / "perf" / "results"


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


README = _read(ROOT / "README.md")
PAGES = {path.name: _read(path) for path in sorted(DOCS.glob("*.md"))}


def _number(value: float | int) -> str:
    return f"{value:,}" if isinstance(value, int) and abs(value) < 2**31 else f"{value:g}"


def _cells(row: str) -> list[str]:
    return [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", row.strip()[1:-1])]


def _section(text: str, heading: str) -> str:
    """The text under `heading` (a whole heading line) up to the next heading of its level or above."""
    lines = text.splitlines()
    start = lines.index(heading)
    level = len(heading) - len(heading.lstrip("#"))
    end = next(
        (i for i in range(start + 1, len(lines))
         if re.match(r"#{1,%d} " % level, lines[i])),
        len(lines),
    )
    return "\n".join(lines[start + 1 : end])


def _tables(text: str) -> list[list[list[str]]]:
    """Each Markdown table in `text`, as rows of cells, header first, without the rule."""
    tables, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            if not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", line.strip()):
                current.append(_cells(line))
        elif current:
            tables.append(current)
            current = []
    return tables


def _table(text: str, first_header: str) -> list[list[str]]:
    """The rows (header left out) of the one table in `text` whose first header cell is this."""
    found = [t for t in _tables(text) if t[0][0] == first_header]
    assert len(found) == 1, f"{len(found)} tables headed {first_header!r}"
    return found[0][1:]


# The front page


def test_the_first_screen_has_the_two_commands_and_the_diagram():
    first_screen = "\n".join(README.splitlines()[:40])
    assert "scripts/serve " in first_screen and "scripts/test " in first_screen
    assert "──WebSocket──▶ gateway/" in first_screen and "└─▶ vocoder" in first_screen
    assert len(README.splitlines()) <= 200, "the README is the front page; the rest goes in docs/"


def test_every_docs_page_is_linked_from_the_readme():
    assert PAGES, "no docs/*.md"
    for name in PAGES:
        assert f"](docs/{name})" in README, name


def _strip_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def _strip_code(text: str) -> str:
    return re.sub(r"`[^`\n]*`", "", _strip_code_blocks(text))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for match in re.finditer(r"^#{1,6} (.+)$", _strip_code_blocks(text), re.M):
        slug = _slug(match[1])
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def test_every_relative_link_points_to_a_file_and_an_anchor_there():
    documents = {ROOT / "README.md": README} | {DOCS / name: text for name, text in PAGES.items()}
    checked = 0
    for path, text in documents.items():
        for target in re.findall(r"\]\(([^)\s]+)\)", _strip_code(text)):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto
            file, _, anchor = target.partition("#")
            resolved = (path.parent / file).resolve() if file else path
            assert resolved.exists(), f"{path.name}: {target}"
            if anchor:
                assert resolved.suffix == ".md", f"{path.name}: {target}"
                assert anchor in _anchors(_read(resolved)), f"{path.name}: {target}: no such heading"
            checked += 1
    assert checked > 50


PACKAGES = ("contract/", "python_backends/", "gateway/", "client/", "operations/", "media/", "model_repository/",
            "perf/", "tests/", "scripts/", "docs/")


def test_every_path_the_pages_name_exists():
    """`python_backends/scheduler.py` and the like, named in code spans: they follow the code when it moves."""
    named = 0
    for text in [README, *PAGES.values()]:
        for path in set(re.findall(r"`([^`\s]+)`", text)):
            if path.startswith(PACKAGES):
                assert any(ROOT.glob(path.rstrip("/"))), path
                named += 1
    assert named > 30


# Configuration


def _default(value) -> str:
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return ",".join(value) or "any"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def test_every_gateway_setting_is_in_the_configuration_table():
    rows = _table(_section(PAGES["configuration.md"], "## Gateway"), "flag")
    table = {row[0]: row[1:] for row in rows}
    parser = argparse.ArgumentParser()
    s.add_arguments(parser)
    actions = parser._actions[1:]
    for action in actions:
        flag = action.option_strings[0]
        env = action.help.split("(env ")[1].split(";")[0]
        assert f"`{flag}`" in table, flag
        assert table[f"`{flag}`"][0] == f"`{env}`", flag
        assert table[f"`{flag}`"][1] == _default(action.default), flag
    assert len(rows) == len(actions), "a flag in the table that the gateway does not have"


def test_every_model_parameter_is_in_the_configuration_page():
    section = _section(PAGES["configuration.md"], "## Model parameters")
    configs = sorted(ROOT.glob("model_repository/*/config.pbtxt")) + sorted(ROOT.glob("model_repository/*/configs/*.pbtxt"))
    assert configs
    for config in configs:
        for key in re.findall(r'parameters: \{ key: "(\w+)"', _read(config)):
            assert f"`{key}`" in section, f"{config.relative_to(ROOT)}: {key}"


# Protocol v1 and the HTTP API


def test_every_error_code_is_documented():
    section = _section(PAGES["protocol.md"], "## Error codes")
    for code in p.ERROR_CODES:
        assert f"`{code}`" in section, code


def test_the_config_table_has_every_format_rate_and_frame_duration():
    config = {row[0]: row[1] for row in _table(PAGES["protocol.md"], "field")}
    assert all(f"`{fmt}`" in config["`format`"] for fmt in p.FORMATS)
    assert re.findall(r"\d+", config["`sample_rate`"].split(":")[0]) == [str(r) for r in p.SAMPLE_RATES]
    assert re.findall(r"\d+", config["`frame_ms`"]) == [str(ms) for ms in p.FRAME_MS]


def test_every_http_response_format_is_documented():
    fields = {row[0]: row[1] for row in _table(PAGES["http-api.md"], "field")}
    for fmt in CONTENT_TYPES:
        assert f"`{fmt}`" in fields["`response_format`"], fmt


def test_every_metric_is_documented():
    for name, value in vars(m).items():
        if name.endswith("_METRIC"):
            assert f"`{value}" in _section(PAGES["triton-models.md"], "## Metrics on Triton's port"), value
    gateway_metrics = re.findall(r'"(speechstream_\w+)"', _read(ROOT / "gateway" / "edge" / "metrics.py"))
    assert gateway_metrics
    for name in gateway_metrics:
        assert f"`{name}" in _section(PAGES["http-api.md"], "## Metrics"), name


# Triton models

TRITON_TYPES = {"TYPE_FP32": "FP32", "TYPE_INT32": "INT32", "TYPE_INT64": "INT64", "TYPE_STRING": "BYTES", "TYPE_BOOL": "BOOL",
                "TYPE_INT16": "INT16"}
MODELS = {
    m.TTS_MODEL: "### `tts` (decoupled BLS)",
    m.ACOUSTIC_MODEL: "### `acoustic` (decoupled)",
    m.VOCODER_MODEL: "### `vocoder`",
    m.TTS_AR_MODEL: "### `tts_ar` (decoupled BLS)",
    m.TALKER_MODEL: "### `talker` (decoupled)",
    m.CODE2WAV_MODEL: "### `code2wav`",
    m.ASR_MODEL: "## `asr`: the recognizer",
}


def _rows(model: str, kind: str) -> dict[str, list[str]]:
    """A model's input or output table: tensor name → the other cells."""
    rows = _table(_section(PAGES["triton-models.md"], MODELS[model]), kind)
    table = {}
    for row in rows:
        name = re.fullmatch(r"`([A-Z_0-9]+)`", row[0])
        assert name, f"{model} {kind}: {row[0]}"
        table[name[1]] = row[1:]
    return table


def test_each_models_tensor_tables_are_the_contracts():
    for model in MODELS:
        for kind, declared in (("input", m.model_inputs(model)), ("output", m.model_outputs(model))):
            table = _rows(model, kind)
            assert list(table) == [t["name"] for t in declared], f"{model} {kind}s"
            for tensor in declared:
                assert table[tensor["name"]][0].split(" ")[0] == TRITON_TYPES[tensor["data_type"]], (model, tensor["name"])


def _range(param) -> str:
    if param.maximum < 2**31:
        return f"{_number(param.minimum)} … {_number(param.maximum)}"
    return f"≥ {_number(param.minimum)}"


def _check_params(model: str, params, defaults: bool) -> None:
    rows = _rows(model, "input")
    for param in params:
        cells = rows[param.name]
        assert cells[2] == _range(param), (model, param.name)
        if defaults and param.default is not None:
            assert cells[1].split(" ")[0] == _number(param.default), (model, param.name)


def test_the_input_tables_have_the_contracts_defaults_and_ranges():
    _check_params(m.TTS_MODEL, m.CHUNK_PARAMS + m.VOICE_PARAMS, defaults=True)
    _check_params(m.ACOUSTIC_MODEL, m.VOICE_PARAMS + m.HEAD_PARAMS, defaults=True)
    _check_params(m.TTS_AR_MODEL, m.AR_CHUNK_PARAMS + m.AR_PARAMS, defaults=True)
    _check_params(m.TALKER_MODEL, m.AR_PARAMS, defaults=True)
    _check_params(m.ASR_MODEL, m.ASR_PARAMS, defaults=True)
    for model in (m.TTS_MODEL, m.TTS_AR_MODEL):
        rows = _rows(model, "input")
        assert rows[m.TEXT][2] == f"1 … {_number(m.MAX_TEXT_CHARS)} characters", model
        assert rows[m.SENTENCES][2].startswith(f"1 … {_number(m.MAX_SENTENCE_CHARS)} characters each"), model
    assert _rows(m.ACOUSTIC_MODEL, "input")[m.TEXT][2] == f"1 … {_number(m.MAX_SENTENCE_CHARS)} characters"
    assert _rows(m.TTS_MODEL, "input")[m.VOICE][1] == f"`{m.DEFAULT_VOICE}`"


# Benchmarks: the tables are copies of, or digests of, perf/results


def _results_table(path: Path, first_header: str) -> tuple[list[str], list[list[str]]]:
    found = [t for t in _tables(_read(path)) if t[0][0] == first_header]
    assert found, f"{path}: no table headed {first_header!r}"
    return found[0][0], found[0][1:]


def _close(shown: str, measured: str) -> bool:
    """`shown` is `measured` rounded to the digits shown."""
    decimals = len(shown.split(".")[1]) if "." in shown else 0
    return abs(float(shown) - float(measured)) <= 0.5 * 10**-decimals + 1e-9


def test_the_benchmark_levels_are_bench_md():
    header, rows = _results_table(RESULTS / "speech" / "bench.md", "system")
    col = {name: i for i, name in enumerate(header)}
    runs = {(r[col["system"]], r[col["workload"]], r[col["clients"]]): r for r in rows}

    def ttfp(run):
        p50, _p90, p99 = run[col["TTFP p50 / p90 / p99 ms"]].split(" / ")
        return f"{p50} / {p99}"

    shown = _table(_section(PAGES["benchmarks.md"], "### Levels"), "workload")
    assert len(shown) >= 6
    for workload, clients, *cells in shown:
        ours = runs["speechstream", workload, clients]
        piper, wyoming = runs["piper-http", workload, clients], runs["wyoming-piper", workload, clients]
        throughput = col["throughput audio-s/s"]
        assert cells == [
            ttfp(ours), ours[throughput], ours[col["stalls (streams)"]].split(" ")[0],
            ttfp(piper), piper[throughput], ttfp(wyoming), wyoming[throughput],
        ], (workload, clients)


def test_the_capacity_levels_are_bench_md():
    path = RESULTS / "speech" / "bench.md"
    header, rows = next((t[0], t[1:]) for t in _tables(_read(path)) if "× C" in t[0])
    col = {name: i for i, name in enumerate(header)}
    runs = {(r[col["system"]], r[col["× C"]], r[col["arrivals"]].split(",")[0]): r for r in rows}  # "Poisson, 0.69/s"
    section = _section(PAGES["benchmarks.md"], "### Listeners at multiples of capacity")
    shown = _table(section, "system")
    assert len(shown) >= 9
    for system, times_c, arrivals, listeners, admitted, refused, lsf, stalls, admitted_of_c in shown:
        run = runs["speechstream" if system == "ours" else system, times_c, arrivals]
        assert [listeners, admitted, admitted_of_c] == [
            run[col["listeners"]], run[col["admitted"]], run[col["admitted throughput ÷ C"]]
        ], (system, times_c)
        slowest = run[col["refusal p50 / max ms"]].split(" / ")[-1]
        assert refused == (run[col["refused"]] if run[col["refused"]] == "0" else f"{run[col['refused']]} ({slowest})")
        assert stalls == ("0" if run[col["stalls (streams)"]] == "0 (0)" else run[col["stalls (streams)"]])
        for value, measured in zip(lsf.split(" / "), run[col["L_sf p50 / p99 ÷ T_sent"]].split(" / ")):
            assert _close(value, measured), (system, times_c, lsf)
    c = re.search(r"C = ([\d.]+)\s+audio-s/s, T_sent =\s+(\d+) ms", section)
    assert c and f"C = **{c[1]} audio-s/s**" in _read(path) and f"T_sent = **{c[2]} ms**" in _read(path)


def test_the_ar_tables_are_ar_md_and_step_logits_md():
    measured = [line for name in ("ar/ar.md", "ar/step_logits.md", "gpu/step_logits.md") for line in _read(RESULTS / name).splitlines()]
    section = _section(PAGES["benchmarks.md"], "## The autoregressive family")
    rows = [line for line in section.splitlines() if line.startswith("|")]
    assert len(rows) >= 10
    for row in rows:
        assert row in measured, row


def test_the_voice_chat_tables_are_perf_chat_results():
    for results, section in (("voice/chat.md", "### Final at once"), ("voice/chat-endpointing-500ms.md", "### Final after 500 ms")):
        _header, rows = _results_table(RESULTS / results, "speculation")
        assert _table(_section(PAGES["chat.md"], section), "speculation") == rows, results


def test_the_chaos_soak_table_is_perf_soak_chaos_results():
    import json

    def digest(r: dict) -> list[str]:
        st, stalls, chaos = r["streams"], r["stalls"], r["chaos"]
        resumed = stalls["resumed"]
        return [
            f"`{chaos['set']}`", str(len(chaos["faults"])),
            f"{r['host_load']['median']:.1f} / {r['host_load']['max']:.1f}",
            f"{st['started']} / {st['done']} ({st['resumed_done']}) / {st['errored']} / {st['hung']}",
            f"{st['errored_cut']} ({st['errored_cut_resumed']}) / {st['errored_refused']} / {st['errored_other']}",
            f"{stalls['all']['over_1_5_s']} / {stalls['around_faults']['over_1_5_s']}; {stalls['all']['longest_s']:.2f}",
            f"{resumed['count']}; {resumed['longest_s']:.2f}" if resumed["count"] else "–",
            f"{chaos['recovery_s']['median']} / {chaos['recovery_s']['max']}",
        ]

    shown = _table(_section(PAGES["benchmarks.md"], "### Soak with chaos"), "fault set")
    measured = {f"`{json.loads(p.read_text())['chaos']['set']}`": json.loads(p.read_text())
                for p in sorted((RESULTS / "soak").glob("soak-chaos-*.json"))}
    assert shown and sorted(row[0] for row in shown) == sorted(measured)
    for row in shown:
        assert row == digest(measured[row[0]]), row[0]


def test_the_recognizers_table_is_perf_asr_results():
    _header, rows = _results_table(RESULTS / "asr" / "asr.md", "measure")
    assert _table(_section(PAGES["benchmarks.md"], "## The recognizer's cost"), "measure") == rows
