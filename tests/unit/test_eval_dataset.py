"""Datasets: JSONL and Parquet rows become checked cases; bad rows are refused with their row number."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import duckdb
import pytest

from troupe.eval.dataset import DatasetError, input_text, load_dataset

SAMPLE = Path(__file__).parents[2] / "examples" / "eval" / "sample.jsonl"


def write_jsonl(path: Path, rows: list[object]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_the_sample_dataset_loads() -> None:
    dataset = load_dataset(SAMPLE)
    assert len(dataset.cases) >= 50
    assert {"calculator", "sleep", "now", "judge", "meant-to-fail"} <= {t for c in dataset.cases for t in c.tags}
    kinds = {s.kind for c in dataset.cases for s in c.expected}
    assert kinds == {"equals", "contains", "regex", "json_schema", "tool_called", "python", "judge"}


def test_jsonl_rows(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "cases.jsonl",
        [
            {"id": 1, "input": "[[say hi]]", "expected": {"equals": "hi"}},
            "",
            "// a comment",
            {"id": "b", "input": [{"role": "user", "content": "x"}], "instructions": "Be brief.", "tags": ["t"],
             "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}], "tool_choice": "required",
             "model": "llama", "timeout_s": 2, "params": {"max_output_tokens": 50}},
        ],
    )  # fmt: skip
    dataset = load_dataset(path)
    a, b = dataset.cases
    assert (a.id, a.row, a.expected[0].kind) == ("1", 1, "equals")
    assert (b.id, b.row, b.tags, b.timeout_s, b.model) == ("b", 4, ("t",), 2.0, "llama")
    body = b.request_body(model="sim", metadata={"k": "v"})
    assert body["model"] == "sim" and body["max_output_tokens"] == 50 and body["metadata"] == {"k": "v"}
    assert b.request_body()["model"] == "llama" and a.request_body()["model"] == "sim"
    assert len(dataset.sha256) == 64


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"id": "a", "input": "x", "expect": {"equals": "x"}}, "unknown field"),
        ({"input": "x"}, "'id'"),
        ({"id": "a"}, "'input' is required"),
        ({"id": "a", "input": "x", "tags": "t"}, "'tags'"),
        ({"id": "a", "input": "x", "timeout_s": 0}, "'timeout_s'"),
        ({"id": "a", "input": "x", "params": {"stream": True}}, "may not set stream"),
        ({"id": "a", "input": "x", "expected": {"regex": "("}}, "invalid regex"),
        ({"id": "a", "input": 42}, "invalid type for 'input': expected a string or an array, got an integer"),
        ({"id": "a", "input": "x", "tool_choice": "required"}, "invalid request"),
        ("[1, 2]", "must be a JSON object"),
        ("{not json", "invalid JSON"),
        # Caught since the rows are pydantic models; the hand-written checks let these through.
        ({"id": "a", "input": "x", "tags": ""}, "invalid type for 'tags': expected an array"),
        ({"id": "a", "input": "x", "params": []}, "invalid type for 'params': expected an object"),
        ('{"id": "a", "input": "x", "timeout_s": NaN}', "'timeout_s': input should be a finite number"),
        ('{"id": "a", "input": "x", "timeout_s": Infinity}', "'timeout_s': input should be a finite number"),
        ({"id": "a", "input": "x", "expected": {"judge": "r", "model": ""}}, "'expected\\[0\\].model'"),
        # Every message names the offending field, down to the grader's option.
        ({"id": "a", "input": "x", "timeout_s": "5"}, "invalid type for 'timeout_s': expected a number, got a string"),
        ({"id": True, "input": "x"}, "invalid type for 'id'"),
        ({"id": "a", "input": "x", "tags": ["t", 1]}, "'tags\\[1\\]': expected a string"),
        ({"id": "a", "input": "x", "expected": [{"contains": "x"}, {"regex": "(", "name": "r"}]},
         "'expected\\[1\\].regex': invalid regex"),
        ({"id": "a", "input": "x", "expected": {"contains": "x", "ignore_case": "yes"}},
         "'expected\\[0\\].ignore_case': expected a boolean, got a string"),
        ({"id": "a", "input": "x", "expected": {"contains": "x", "arguments": {}}},
         "unknown option\\(s\\) for 'contains' in 'expected\\[0\\]': arguments \\('contains' takes name, ignore_case\\)"),
        ({"id": "a", "input": "x", "expected": {"type": "contains", "value": "x"}},
         "'expected\\[0\\]': a grader must be an object with exactly one of the keys equals, contains"),
    ],
)  # fmt: skip
def test_invalid_rows_name_the_row(tmp_path: Path, row: object, message: str) -> None:
    path = write_jsonl(tmp_path / "cases.jsonl", [{"id": "ok", "input": "x"}, row])
    with pytest.raises(DatasetError, match=message) as info:
        load_dataset(path)
    assert "cases.jsonl:2" in str(info.value)


def test_a_case_pickles_with_its_row(tmp_path: Path) -> None:
    # Cases travel to the eval workers; the row number is not a field, so a row cannot set it.
    row = {"id": 7, "input": "x", "expected": {"judge": "r", "model": "m"}}
    path = write_jsonl(tmp_path / "cases.jsonl", ["", row])
    [case] = load_dataset(path).cases
    copy = pickle.loads(pickle.dumps(case))
    assert copy == case and copy.row == 2 and copy.id == "7"
    assert copy.expected[0].options == {"model": "m"} and copy.expected[0].value == "r"
    with pytest.raises(DatasetError, match="unknown field\\(s\\) row"):
        load_dataset(write_jsonl(tmp_path / "row.jsonl", [{"id": "a", "input": "x", "row": 3}]))


def test_duplicate_ids_missing_files_and_empty_datasets(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="duplicate id 'a'"):
        load_dataset(write_jsonl(tmp_path / "dup.jsonl", [{"id": "a", "input": "x"}, {"id": "a", "input": "y"}]))
    with pytest.raises(DatasetError, match="cannot read"):
        load_dataset(tmp_path / "missing.jsonl")
    with pytest.raises(DatasetError, match="no cases"):
        load_dataset(write_jsonl(tmp_path / "empty.jsonl", [""]))


def test_parquet_with_json_text_and_struct_columns(tmp_path: Path) -> None:
    path = tmp_path / "cases.parquet"
    with duckdb.connect() as conn:
        conn.execute(
            f"""
            COPY (
                SELECT * FROM (VALUES
                    ('a', '[[say hi]]', '{{"equals": "hi"}}', ['x', 'y'], NULL),
                    ('b', '[{{"role": "user", "content": "[[say yo]]"}}]', '[{{"contains": "yo"}}]', [], 1.5)
                ) AS t(id, input, expected, tags, timeout_s)
            ) TO '{path}' (FORMAT parquet)
            """
        )
    a, b = load_dataset(path).cases
    assert (a.input, a.expected[0].kind, a.tags, a.timeout_s) == ("[[say hi]]", "equals", ("x", "y"), None)
    assert b.input == [{"role": "user", "content": "[[say yo]]"}] and b.timeout_s == 1.5
    structs = tmp_path / "structs.parquet"
    with duckdb.connect() as conn:
        conn.execute(
            f"""
            COPY (SELECT 'c' AS id, 'q' AS input,
                         [{{'contains': 'q', 'regex': NULL}}, {{'contains': NULL, 'regex': '^q'}}] AS expected)
            TO '{structs}' (FORMAT parquet)
            """
        )
    [c] = load_dataset(structs).cases
    assert [s.kind for s in c.expected] == ["contains", "regex"]


def test_input_text() -> None:
    assert input_text("hi") == "hi"
    items = [{"role": "user", "content": "a"}, {"type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "b"}]}, {"type": "function_call_output", "output": "x"}]  # fmt: skip
    assert input_text(items) == "a\nb"


def test_the_models_a_run_needs(tmp_path: Path) -> None:
    dataset = load_dataset(write_jsonl(tmp_path / "cases.jsonl", [
        {"id": "a", "input": "x", "expected": {"judge": "fair?"}},
        {"id": "b", "input": "x", "model": "llama", "expected": {"judge": "fair?", "model": "judge-1"}},
    ]))  # fmt: skip
    assert dataset.models() == {"sim": "case 'a'", "llama": "case 'b'", "judge-1": "the judge of case 'b'"}
    assert dataset.models(model="gpt", judge_model="j") == {"gpt": "case 'a'", "j": "the judge of case 'a'",
                                                            "judge-1": "the judge of case 'b'"}  # fmt: skip
