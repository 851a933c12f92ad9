"""docs/query-language.md and GetInstructions come from one source and tell the truth."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from chd.core.errors import InvalidRequest
from chd.core.history import ConversationHistory
from chd.core.language.guide import GUIDE, PARAMETERS, Example
from chd.core.language.instructions import INSTRUCTIONS, render_instructions, render_markdown
from chd.core.language.intents import OPERATIONS, field_sources
from chd.core.language.parser import parse
from chd.core.settings import Settings
from chd.service.server import Server, build_server
from chd.v1 import daemon_pb2, daemon_pb2_grpc
from tests.conftest import ROOT, query
from tests.demo_conversation import seed_demo

DOC = ROOT / "docs" / "query-language.md"
EXAMPLES = [(g.operation, e) for g in GUIDE for e in g.examples]


class TestOneSource:
    """The document is generated, GetInstructions renders the same guide, nothing is missing."""

    def test_committed_document_is_what_the_guide_renders(self) -> None:
        """Edit daemon/core/language/guide.py and run scripts/gen_query_docs.py, never the .md by hand."""
        assert DOC.read_text(encoding="utf-8") == render_markdown()

    def test_generator_check_mode_passes_on_the_committed_document(self) -> None:
        """The script's --check (for CI) agrees with the test above."""
        done = subprocess.run(
            [sys.executable, "scripts/gen_query_docs.py", "--check"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr

    def test_instructions_and_document_list_the_same_forms_and_examples(self) -> None:
        """Every form and example query appears in both texts."""
        for guide in GUIDE:
            for text in [*guide.forms, *(e.query for e in guide.examples)]:
                assert text in INSTRUCTIONS
                assert text.replace("|", "\\|") in render_markdown()

    def test_every_operation_is_documented_with_every_parameter(self) -> None:
        """A field added to an intent without documentation fails here."""
        assert {g.operation for g in GUIDE} == set(OPERATIONS)
        for operation in OPERATIONS:
            assert set(PARAMETERS[operation]) == set(field_sources(operation))

    def test_get_instructions_rpc_returns_the_rendered_guide(
        self, stub: daemon_pb2_grpc.DaemonStub
    ) -> None:
        """What the RPC serves is the rendering of the guide."""
        answer = stub.GetInstructions(daemon_pb2.GetInstructionsRequest(), timeout=10).instructions
        assert answer == render_instructions()


def _concrete(form: str) -> str:
    return (
        form.replace("<text>", "hello there")
        .replace("<topic>", "Paris")
        .replace("utterance 12", "utterance 2")
        .replace("Utterance 12", "Utterance 2")
    )


class TestSourcesAreTrue:
    """A parameter documented as readable from the query text is read from some phrasing."""

    def test_every_text_parameter_is_produced_by_a_corpus_or_guide_phrasing(self) -> None:
        """Parse the corpus and the guide; each (operation, parameter) said to come from text appears."""
        import json

        from chd.core.language.guide import NOT_IN_TEXT

        texts = [
            json.loads(line)["query"]
            for line in (ROOT / "tests/corpus/queries.jsonl").read_text().splitlines()
        ]
        texts += [_concrete(f) for g in GUIDE for f in g.forms] + [e.query for _, e in EXAMPLES]
        produced: set[tuple[str, str]] = set()
        for text in texts:
            try:
                parsed = parse(text)
            except InvalidRequest:
                continue
            produced |= {(parsed.operation, name) for name in parsed.fields}
        claimed = {(op, name) for op in OPERATIONS for name in PARAMETERS[op]} - NOT_IN_TEXT
        assert claimed <= produced, sorted(claimed - produced)


class TestFormsParse:
    """Every documented form is read by the rules as its own operation."""

    @pytest.mark.parametrize(
        "operation,form",
        [(g.operation, f) for g in GUIDE for f in g.forms],
        ids=lambda v: str(v)[:40],
    )
    def test_documented_form_parses_to_its_operation(self, operation: str, form: str) -> None:
        """No documented phrasing is refused or read as another operation."""
        parsed = parse(_concrete(form))
        assert parsed.operation == operation and parsed.confidence == 1.0


@pytest.fixture(scope="module")
def demo_server() -> Iterator[Server]:
    history = ConversationHistory(settings=Settings())
    running = build_server(history, "127.0.0.1", 0)
    yield running
    running.stop(grace=1)


def _expectation_holds(
    example: Example, stub: daemon_pb2_grpc.DaemonStub, cid: str, history: ConversationHistory
) -> None:
    metadata = {"conversation_id": cid, **example.metadata}
    expect = example.expect
    try:
        response = query(stub, example.query, metadata, example.data)
    except grpc.RpcError as error:
        assert expect.get("error") == error.code().name, error.details()
        response = None
    else:
        assert "error" not in expect, f"answered {response.operation}"
    if response is not None:
        result: dict[str, Any] = dict(response.result)
        if "operation" in expect:
            assert response.operation == expect["operation"]
        if "seqs" in expect:
            assert [int(u["seq"]) for u in result["utterances"]] == expect["seqs"]
        if "removed" in expect:
            assert [int(s) for s in result["removed"]] == expect["removed"]
        for key in ("stored", "result"):
            source = result.get("utterance", {}) if key == "stored" else result
            for name, value in expect.get(key, {}).items():
                got = source[name]
                if isinstance(value, dict):
                    assert {k: got[k] for k in value} == value
                else:
                    assert got == value, name
    if "left" in expect:
        assert [u.seq for u in history.backend.read(cid).utterances] == expect["left"]


class TestExamplesAreTrue:
    """Each example's stated effect is what the real server does to the demo conversation."""

    @pytest.mark.parametrize("operation,example", EXAMPLES, ids=[e.query[:40] for _, e in EXAMPLES])
    def test_documented_example_has_its_documented_effect(
        self, demo_server: Server, operation: str, example: Example
    ) -> None:
        """Run through gRPC on a fresh copy of the demo conversation."""
        cid = "example-" + re.sub(r"\W+", "-", example.query)[:80] + f"-{id(example)}"
        seed_demo(demo_server.history, cid)
        with grpc.insecure_channel(f"127.0.0.1:{demo_server.port}") as channel:
            _expectation_holds(
                example, daemon_pb2_grpc.DaemonStub(channel), cid, demo_server.history
            )


def test_the_stats_returns_name_every_field_a_stats_answer_has() -> None:
    """The guide's "Returns" for stats is the field list a real stats answer carries (issue 30 item 5).

    Both ways: with the offline summarizer alone, and with a summarizer that
    can reply late (as Claude does), which adds summary_late_results.
    """
    from chd.core.language.guide import GUIDE, STATS_CLAUDE_FIELDS, STATS_FIELDS
    from chd.core.summaries.extractive import ExtractiveSummarizer
    from chd.core.summaries.writer import SummaryWriter
    from chd.core.tokens import default_counter

    (stats,) = [g for g in GUIDE if g.operation == "stats"]
    assert stats.returns.startswith("result." + ", ".join(STATS_FIELDS) + "; ")
    assert ", ".join(STATS_CLAUDE_FIELDS) in stats.returns
    counter = default_counter()
    late = SummaryWriter(
        ExtractiveSummarizer(counter), counter, ExtractiveSummarizer(counter), late_after=1.0
    )
    for writer, expected in ((None, STATS_FIELDS), (late, STATS_FIELDS + STATS_CLAUDE_FIELDS)):
        history = ConversationHistory(background=False, writer=writer)
        try:
            assert list(history.query("Stats").result) == list(expected)
        finally:
            history.close()
