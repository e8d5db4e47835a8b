"""Tests for the item formats: what each writer writes (Scrapy's shapes), that a file is
whole after every flush and after a writer dies, and the torn write a kill can leave."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import hashcrawl
from hashcrawl._output._documents import CsvSink, JsonSink, XmlSink
from hashcrawl._output._parquet import ParquetSink
from hashcrawl._output._sinks import JsonLinesSink, format_of, sink_for
from testing.formats import FORMATS, item_set, read_items

ITEMS = [
    {"url": "https://a.example/1", "title": "One & <two>", "tags": ["x", "y"], "status": 200},
    {"url": "https://a.example/2", "title": "line\r\nbreak", "tags": [], "status": 404},
    {"url": "https://a.example/3", "title": None, "tags": ["z"], "status": 301},
]


def test_json_is_scrapys_array_one_item_per_line(tmp_path: Path) -> None:
    """``[``, the items one per line with commas, ``]``: Scrapy's feed export's shape."""
    path = tmp_path / "items.json"
    sink = JsonSink(path)
    sink.write(ITEMS[:2])
    sink.flush()
    sink.write(ITEMS[2:])
    sink.close()
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[0] == "[" and lines[-1] == "]"
    assert [json.loads(line.removesuffix(",")) for line in lines[1:-1]] == ITEMS
    assert [line.endswith(",") for line in lines[1:-1]] == [True, True, False]


def _written(path: Path, items: list[dict[str, Any]]) -> Path:
    sink = sink_for(str(path))
    sink.write(items)
    sink.close()
    return path


def test_item_sets_of_two_ports_compare_as_their_readers_give_them(tmp_path: Path) -> None:
    """``item_set`` (scrapy_parity's comparison) writes each run's site root ``SITE/`` and
    nothing else: one port's JSON Lines equals another's XML of the same text items, a
    number CSV gives as a string differs, and so does a missing item."""
    one, two = "http://127.0.0.2:8001/", "http://127.0.0.2:8002/"
    pages = [{"url": f"{one}p/{n}", "title": f"page {n}"} for n in (1, 2)]
    moved = [{k: v.replace(one, two) for k, v in item.items()} for item in pages]
    jsonl = item_set(_written(tmp_path / "a.jsonl", pages), one)
    assert jsonl == item_set(_written(tmp_path / "b.xml", moved), two)
    assert jsonl != item_set(_written(tmp_path / "c.xml", moved[:1]), two)
    counted = [{"url": f"{one}p/1", "n": 1}]
    csv_set = item_set(_written(tmp_path / "d.csv", counted), one)
    assert csv_set == {'{"n": "1", "url": "SITE/p/1"}'}
    assert csv_set != item_set(_written(tmp_path / "e.jsonl", counted), one)


def test_an_empty_json_file_is_an_empty_array(tmp_path: Path) -> None:
    """A sink that got no items leaves ``[]`` as Scrapy does (``[`` and ``]`` on lines)."""
    path = tmp_path / "items.json"
    JsonSink(path).close()
    assert path.read_text() == "[\n\n]"
    assert json.loads(path.read_text()) == []


def test_xml_is_scrapys_items_document(tmp_path: Path) -> None:
    """The XML declaration, ``<items>``, an ``<item>`` per line, lists as ``<value>``s."""
    path = tmp_path / "items.xml"
    sink = XmlSink(path)
    sink.write(ITEMS[:1])
    sink.close()
    assert path.read_text(encoding="utf-8") == (
        '<?xml version="1.0" encoding="utf-8"?>\n<items>\n'
        "<item><url>https://a.example/1</url><title>One &amp; &lt;two&gt;</title>"
        "<tags><value>x</value><value>y</value></tags><status>200</status></item>\n"
        "</items>"
    )


def test_xml_keeps_carriage_returns_and_replaces_what_xml_cannot_hold(tmp_path: Path) -> None:
    """A page's control characters would make the file unreadable: they become U+FFFD."""
    path = tmp_path / "items.xml"
    sink = XmlSink(path)
    sink.write([{"title": "a\r\nb\x00c\x1bd"}, {"title": None}])
    sink.close()
    assert read_items(path) == [{"title": "a\r\nb\ufffdc\ufffdd"}, {"title": ""}]


def test_xml_refuses_a_field_name_that_is_no_xml_name(tmp_path: Path) -> None:
    """``price (usd)`` cannot be an element: the write says so, and none of its batch is
    written."""
    path = tmp_path / "items.xml"
    sink = XmlSink(path)
    with pytest.raises(hashcrawl.ConfigError, match=r"XML name, got 'price \(usd\)'"):
        sink.write([{"url": "u1"}, {"price (usd)": 3}])
    sink.close()
    assert read_items(path) == []


def test_csv_joins_lists_and_leaves_out_later_fields_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Columns from the first item; a list of strings joined with commas; a field the
    header lacks left out, said once (Scrapy's CsvItemExporter does the same)."""
    path = tmp_path / "items.csv"
    sink = CsvSink(path)
    with caplog.at_level(logging.WARNING, logger="hashcrawl"):
        sink.write([ITEMS[0], {**ITEMS[1], "extra": 1}, {**ITEMS[2], "extra": 2}])
        sink.close()
    assert read_items(path) == [
        {"url": "https://a.example/1", "title": "One & <two>", "tags": "x,y", "status": "200"},
        {"url": "https://a.example/2", "title": "line\r\nbreak", "tags": "", "status": "404"},
        {"url": "https://a.example/3", "title": "", "tags": "z", "status": "301"},
    ]
    assert [r.getMessage() for r in caplog.records] == [
        f"{path} has no column for the fields ['extra']: left out"
    ]


def test_a_second_csv_sink_takes_the_files_header(tmp_path: Path) -> None:
    """Workers sharing a file agree on its columns: the header there wins."""
    path = tmp_path / "items.csv"
    first = CsvSink(path)
    first.write([{"url": "u1", "status": 200}])
    first.close()
    second = CsvSink(path)
    second.write([{"status": 404, "url": "u2"}])
    second.close()
    assert read_items(path) == [{"url": "u1", "status": "200"}, {"url": "u2", "status": "404"}]


@pytest.mark.parametrize("ending", ["json", "xml"])
def test_a_document_is_whole_after_every_flush(tmp_path: Path, ending: str) -> None:
    """Read between flushes, with the sink still open, the file is a valid document."""
    path = tmp_path / f"items.{ending}"
    sink = sink_for(str(path))
    seen = []
    for item in ITEMS:
        sink.write([item])
        sink.flush()
        seen.append(len(read_items(path)))
    sink.close()
    assert seen == [1, 2, 3]


#: A child that flushes items into a sink per format, says so, and waits to be killed.
ABANDONED = """
import sys, time
from hashcrawl._output._parquet import ParquetSink
from hashcrawl._output._sinks import sink_for
paths = sys.argv[1:]
sinks = [ParquetSink(p, rows=2) if p.endswith(".parquet") else sink_for(p) for p in paths]
for n in range(5):
    for sink in sinks:
        sink.write([{"url": f"u{n}", "n": n}])
        sink.flush()
print("FLUSHED", flush=True)
time.sleep(300)
"""


def test_a_writer_killed_without_close_leaves_files_their_readers_open(tmp_path: Path) -> None:
    """SIGKILL after five flushes: json, csv, xml.etree and JSON Lines read all five
    items; pyarrow reads the closed Parquet parts, and the next sink on the directory
    turns the dead one's journal into the last part."""
    paths = [tmp_path / f"items.{ending}" for ending in FORMATS]
    argv = [sys.executable, "-c", ABANDONED, *map(str, paths)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None and child.stdout.readline() == "FLUSHED\n"
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
    urls = [f"u{n}" for n in range(5)]
    for path in paths[:-1]:
        assert [item["url"] for item in read_items(path)] == urls, path
    parquet = paths[-1]
    assert [item["url"] for item in read_items(parquet)] == urls[:4]
    ParquetSink(parquet).close()
    assert sorted(item["url"] for item in read_items(parquet)) == urls
    assert [p.name for p in parquet.iterdir() if p.name.startswith(".")] == []


def _flushed(path: Path, batches: list[list[dict[str, Any]]]) -> list[bytes]:
    """The file's bytes after each batch's flush."""
    sink = sink_for(str(path))
    states = []
    for batch in batches:
        sink.write(batch)
        sink.flush()
        states.append(path.read_bytes())
    sink.close()
    return states


TAILS = {"json": b"\n]", "xml": b"</items>", "csv": b"", "jsonl": b""}


@pytest.mark.parametrize("ending", ["json", "xml", "csv", "jsonl"])
def test_a_flush_torn_at_any_byte_is_cut_back_and_the_file_stays_readable(
    tmp_path: Path, ending: str
) -> None:
    """A kill can stop a flush's write at any byte (over the old closing tail, too): the
    next sink cuts the file back to its last whole item and appends after it. Every item
    of the earlier flush stays, the torn flush keeps at most its whole items, and the
    file reads as before (each cut point tried)."""
    path = tmp_path / f"items.{ending}"
    before, after = _flushed(path, [[ITEMS[0]], ITEMS[1:]])
    end = len(before) - len(TAILS[ending])
    for cut in range(end, len(after)):
        path.write_bytes(after[:cut] + before[cut:])  # the new bytes over the old tail
        sink = sink_for(str(path))
        sink.write([{**ITEMS[0], "url": "last"}])
        sink.close()
        urls = [item["url"] for item in read_items(path)]
        assert urls[0] == ITEMS[0]["url"] and urls[-1] == "last", (cut, urls)
        assert urls[1:-1] in ([], [ITEMS[1]["url"]], [i["url"] for i in ITEMS[1:]]), cut


@pytest.mark.parametrize("ending", ["json", "xml"])
def test_a_file_another_program_wrote_is_refused_and_left_as_it_is(
    tmp_path: Path, ending: str
) -> None:
    """items.json holding JSON Lines (what -o items.json wrote before) is not overwritten."""
    path = tmp_path / f"items.{ending}"
    path.write_text('{"url": "u1"}\n')
    with pytest.raises(hashcrawl.ConfigError, match="did not write: it is left as it is"):
        sink_for(str(path))
    assert path.read_text() == '{"url": "u1"}\n'


#: A child that flushes 40 batches of 5 items into one file, as a worker of a crawl does.
SHARER = """
import sys
from hashcrawl._output._sinks import sink_for
sink = sink_for(sys.argv[1])
for n in range(40):
    sink.write([{"url": f"{sys.argv[2]}-{n}-{k}", "k": k} for k in range(5)])
    sink.flush()
sink.close()
"""


@pytest.mark.parametrize("ending", ["json", "xml", "csv", "jsonl"])
def test_processes_sharing_a_file_each_land_every_batch_whole(tmp_path: Path, ending: str) -> None:
    """Two processes flush into one file at once (as crawl's workers do): every item of
    both is there once, and the file reads."""
    path = tmp_path / f"items.{ending}"
    children = [subprocess.Popen([sys.executable, "-c", SHARER, str(path), name]) for name in "ab"]
    assert [child.wait() for child in children] == [0, 0]
    urls = sorted(item["url"] for item in read_items(path))
    assert urls == sorted(f"{name}-{n}-{k}" for name in "ab" for n in range(40) for k in range(5))


def test_parquet_closes_a_part_every_rows_items_and_at_close(tmp_path: Path) -> None:
    """With rows=2, five flushed items make parts of 2, 2 and (at close) 1, readable as one."""
    path = tmp_path / "items.parquet"
    sink = ParquetSink(path, rows=2)
    for item in ITEMS + ITEMS[:2]:
        sink.write([item])
        sink.flush()
    assert len(sink.files) == 2
    sink.close()
    assert len(sink.files) == 3 and sorted(os.listdir(path)) == sorted(
        Path(f).name for f in sink.files
    )
    rows = read_items(path)
    assert [r["url"] for r in rows] == [i["url"] for i in ITEMS + ITEMS[:2]]
    assert rows[2]["title"] is None and rows[0]["tags"] == ["x", "y"]


def test_parquet_parts_of_two_sinks_share_the_first_parts_columns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A column all None in the first part is text, so a later part's text fits it; a
    field the first part lacks is left out with a warning."""
    path = tmp_path / "items.parquet"
    first, second = ParquetSink(path), ParquetSink(path)
    first.write([{"url": "u1", "title": None}])
    first.close()
    with caplog.at_level(logging.WARNING, logger="hashcrawl"):
        second.write([{"url": "u2", "title": "Two", "new": 1}])
        second.close()
    assert sorted(read_items(path), key=lambda r: r["url"]) == [
        {"url": "u1", "title": None},
        {"url": "u2", "title": "Two"},
    ]
    assert "no column for the fields ['new']" in caplog.text


@pytest.mark.parametrize(
    ("path", "ending"),
    [("a.jsonl", ".jsonl"), ("a.JSON", ".json"), ("a.jl", ".jsonl"), ("p.warc.gz", ".warc.gz"),
     ("a.parquet", ".parquet"), ("-", ".jsonl"), (os.devnull, ".jsonl")],
)  # fmt: skip
def test_the_format_comes_from_the_names_ending(path: str, ending: str) -> None:
    """Endings in any case; standard output and a device take JSON Lines."""
    assert format_of(path).replace(".jl", ".jsonl") == ending


@pytest.mark.parametrize("path", ["items.txt", "items", "items.json.bak"])
def test_an_unknown_ending_is_refused_with_the_known_ones(tmp_path: Path, path: str) -> None:
    """One line naming the file and every ending there is; no file is made."""
    with pytest.raises(hashcrawl.ConfigError) as refused:
        hashcrawl.sink_for(str(tmp_path / path))
    assert ".jsonl, .jl, .json, .csv, .xml, .parquet, .warc.gz, .warc" in str(refused.value)
    assert "\n" not in str(refused.value)
    assert list(tmp_path.iterdir()) == []


def test_sink_for_gives_each_formats_sink(tmp_path: Path) -> None:
    """The Python API picks the sink as -o does."""
    kinds = {e: type(sink_for(str(tmp_path / f"items.{e}"))) for e in FORMATS}
    assert kinds == {
        "jsonl": JsonLinesSink,
        "json": hashcrawl.JsonSink,
        "csv": hashcrawl.CsvSink,
        "xml": hashcrawl.XmlSink,
        "parquet": hashcrawl.ParquetSink,
    }


@pytest.mark.parametrize("name", ["items.jsonl", "items.json", "items.csv", "items.xml"])
def test_the_shards_of_one_worker_writing_and_flushing_from_threads_lose_nothing(
    tmp_path: Path, name: str
) -> None:
    """One sink written and flushed by several threads at once (a sharded worker's
    shards) keeps every item: a flock is the open file's, not the thread's."""
    import threading

    sink = sink_for(str(tmp_path / name))
    start = threading.Barrier(4)

    def shard(n: int) -> None:
        start.wait()
        for i in range(50):
            sink.write([{"url": f"http://a.test/{n}/{i}", "n": n}])
            sink.flush()

    threads = [threading.Thread(target=shard, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sink.close()
    urls = {str(item["url"]) for item in read_items(tmp_path / name)}
    assert urls == {f"http://a.test/{n}/{i}" for n in range(4) for i in range(50)}
