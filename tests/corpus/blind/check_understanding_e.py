#!/usr/bin/env python3
"""Validator for the blind set understanding_e.jsonl (written by blind writer e).

Checks the shape of every entry against the brief: ids, voices, allowed keys,
stored text verbatim in the query or equal to data.text, expected speaker and
turn, seqs exist in the fixture, refusal entries, shares per voice and per
operation, typo budget, voice-transcript style, and sentence-frame variety.
Run from the repository root:  python3 tests/corpus/blind/check_understanding_e.py
"""
import collections
import json
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE / "understanding_e.jsonl"

# The fixture: conversation "default", seq -> (turn, speaker, text, age)
FIXTURE = {
    1: (1, "user", "What's the weather in Paris today?", "2h"),
    2: (1, "assistant", "Paris is sunny, 24 degrees.", "2h"),
    3: (2, "user", "And tomorrow?", "2h"),
    4: (2, "assistant", "Rain is expected in Paris tomorrow.", "2h"),
    5: (3, "user", "Book a table for two at 8pm.", "1m"),
    6: (3, "assistant", "Booked: Chez Marie, 8pm, two people.", "1m"),
    7: (4, "user", "What is our budget for the trip?", "1m"),
    8: (4, "assistant", "The budget is 1200 euros.", "1m"),
}
DEFAULT_SETTINGS = {"buffer_size": 20, "max_tokens": 8000, "eviction_batch": 5,
                    "summary_token_limit": 512, "eviction_policy": "fifo"}
VOICES = {"llm-orchestrator": (0.35, 0.45), "support-desk": (0.15, 0.25),
          "data-scientist": (0.15, 0.25), "voice-transcript": (0.15, 0.25)}
OP_SHARES = {"store": (0.22, 0.30), "retrieve": (0.19, 0.26), "remove": (0.17, 0.23),
             "summarize": (0.12, 0.18), "configure": (0.06, 0.10)}
REFUSALS = (8, 12)
SPEAKERS = {"user", "assistant", "system"}
# Deliberate typos: id -> the misspelled word as it appears in the query.
TYPOS = {
    "e-015": "Plese", "e-034": "Retreive", "e-047": "throught", "e-058": "Sumarize",
    "e-077": "ad", "e-088": "entrys", "e-095": "remvoe", "e-102": "convesation",
    "e-114": "insrt", "e-123": "selct", "e-132": "delte",
}
NUM_WORDS = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
             "seven": 7, "eight": 8, "nine": 9, "ten": 10}
FILLERS = {"um", "uh", "so", "yeah", "like", "okay", "hey"}

errors = []


def fail(eid, msg):
    errors.append(f"{eid}: {msg}")


def check_seq_list(eid, name, seqs, allow_empty=True):
    if not isinstance(seqs, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in seqs):
        fail(eid, f"{name} must be a list of ints")
        return
    if not allow_empty and not seqs:
        fail(eid, f"{name} must not be empty")
    if seqs != sorted(set(seqs)):
        fail(eid, f"{name} must be ascending and unique: {seqs}")
    for s in seqs:
        if s not in FIXTURE:
            fail(eid, f"{name} refers to seq {s}, not in the fixture")


def turn_mentioned(query, turn):
    q = query.lower()
    words = [w for w, n in NUM_WORDS.items() if n == turn]
    pats = [rf"turn\s*(number\s*)?[=:]?\s*{turn}\b"] + [rf"turn\s+{w}\b" for w in words]
    return any(re.search(p, q) for p in pats)


def main():
    lines = DATA.read_text(encoding="utf-8").splitlines()
    entries = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            fail(f"line {n}", "blank line")
            continue
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError as ex:
            fail(f"line {n}", f"not JSON: {ex}")
    if len(entries) < 170:
        fail("file", f"only {len(entries)} entries, need at least 170")

    seen_ids, seen_queries = set(), set()
    voice_count, op_count = collections.Counter(), collections.Counter()
    frames = collections.Counter()
    for i, r in enumerate(entries, 1):
        eid = r.get("id", f"#{i}")
        if eid != f"e-{i:03d}":
            fail(eid, f"id should be e-{i:03d}")
        if eid in seen_ids:
            fail(eid, "duplicate id")
        seen_ids.add(eid)
        extra = set(r) - {"id", "voice", "query", "metadata", "data", "expect"}
        if extra:
            fail(eid, f"unknown keys {extra}")
        voice, query, exp = r.get("voice"), r.get("query"), r.get("expect")
        md, data = r.get("metadata", {}), r.get("data", {})
        if voice not in VOICES:
            fail(eid, f"unknown voice {voice!r}")
        if not isinstance(query, str) or not query.strip():
            fail(eid, "query must be a non-empty string")
            continue
        if query in seen_queries:
            fail(eid, "duplicate query")
        seen_queries.add(query)
        voice_count[voice] += 1

        # metadata / data shape
        if set(md) - {"conversation_id", "speaker", "turn_number"}:
            fail(eid, f"metadata keys {set(md)}")
        if "speaker" in md and md["speaker"] not in SPEAKERS:
            fail(eid, "bad metadata.speaker")
        if "turn_number" in md and not (isinstance(md["turn_number"], int) and md["turn_number"] >= 0):
            fail(eid, "bad metadata.turn_number")
        if set(data) - {"text", "token_limit"}:
            fail(eid, f"data keys {set(data)} (never operation)")
        if not isinstance(exp, dict):
            fail(eid, "expect missing")
            continue

        # frame variety: first three words, fillers dropped
        words = [w for w in re.findall(r"[a-z_']+", query.lower())]
        core = [w for w in words if w not in FILLERS] if voice == "voice-transcript" else words
        frames[" ".join(core[:3])] += 1

        # voice-transcript style
        if voice == "voice-transcript":
            if re.search(r"[A-Z0-9.,;:!?\"()\[\]{}=]", query):
                fail(eid, "voice-transcript must have no capitals, digits or punctuation")
            if eid in TYPOS:
                fail(eid, "typos belong to the other voices")

        if "error" in exp:
            if exp != {"error": "INVALID_ARGUMENT"}:
                fail(eid, "a refusal expects only error: INVALID_ARGUMENT")
            if md or data:
                fail(eid, "refusals carry no metadata/data here")
            op_count["refuse"] += 1
            continue
        op = exp.get("operation")
        op_count[op] += 1
        allowed = {"store": {"stored"}, "retrieve": {"seqs", "must_include", "must_exclude", "include_summary", "summary_only"},
                   "remove": {"removed"}, "summarize": set(), "configure": {"settings"}, "mark": {"important"}}
        if op not in allowed:
            fail(eid, f"unknown operation {op!r}")
            continue
        if set(exp) - {"operation"} - allowed[op]:
            fail(eid, f"expect keys {set(exp)} not allowed for {op}")
        if "text" in data and op != "store":
            fail(eid, "data.text only for stores")
        if "token_limit" in data and op != "summarize":
            fail(eid, "data.token_limit only for summaries")
        conv = md.get("conversation_id", "default")

        if op == "store":
            s = exp.get("stored", {})
            text, spk, turn = s.get("text"), s.get("speaker"), s.get("turn_number")
            if not isinstance(text, str) or not text:
                fail(eid, "stored.text missing")
                continue
            if text[0] in "'\"" or text[-1] in "'\"":
                fail(eid, "stored text must not carry its surrounding quote marks")
            if "text" in data:
                if data["text"] != text:
                    fail(eid, "stored.text must equal data.text")
            elif text not in query:
                fail(eid, "stored text does not occur verbatim in the query")
            if spk not in SPEAKERS:
                fail(eid, "stored.speaker invalid")
            if "speaker" in md and md["speaker"] != spk:
                fail(eid, "stored.speaker differs from metadata.speaker")
            if spk != "user" and spk not in query.lower() and "speaker" not in md:
                # the speaker must be named somewhere (bot = assistant)
                if not (spk == "assistant" and re.search(r"\bbot\b", query.lower())):
                    fail(eid, f"speaker {spk} is not named in the query or metadata")
            if "turn_number" in md:
                want = md["turn_number"]
            elif conv == "default":
                want = 5 if spk == "user" else 4
            else:
                want = 1 if spk == "user" else 0
            if turn != want and not turn_mentioned(query, turn):
                fail(eid, f"turn_number {turn} but the rule gives {want} and the query names no turn")
            if eid in TYPOS and TYPOS[eid] in text:
                fail(eid, "typo inside the stored utterance")

        elif op == "retrieve":
            topic = "must_include" in exp or "must_exclude" in exp
            if topic:
                if "seqs" in exp:
                    fail(eid, "topic search uses must_include/must_exclude, not seqs")
                inc, exc = exp.get("must_include", []), exp.get("must_exclude", [])
                check_seq_list(eid, "must_include", inc, allow_empty=False)
                check_seq_list(eid, "must_exclude", exc)
                if set(inc) & set(exc):
                    fail(eid, "must_include and must_exclude overlap")
            else:
                if "seqs" not in exp:
                    fail(eid, "non-topic retrieve needs seqs")
                else:
                    check_seq_list(eid, "seqs", exp["seqs"])
                    if exp.get("summary_only") and exp["seqs"]:
                        fail(eid, "summary_only returns no utterances")
                    if conv != "default" and exp["seqs"]:
                        fail(eid, "other conversations are empty")
            for k in ("include_summary", "summary_only"):
                if k in exp and not isinstance(exp[k], bool):
                    fail(eid, f"{k} must be a bool")

        elif op == "remove":
            check_seq_list(eid, "removed", exp.get("removed"), allow_empty=False)
            if conv != "default":
                fail(eid, "removes run on the fixture conversation")

        elif op == "configure":
            st = exp.get("settings")
            if not isinstance(st, dict) or not st:
                fail(eid, "configure needs settings")
                continue
            for k, v in st.items():
                if k not in DEFAULT_SETTINGS:
                    fail(eid, f"unknown setting {k}")
                elif k == "eviction_policy":
                    if v not in ("fifo", "importance"):
                        fail(eid, "eviction_policy must be fifo or importance")
                elif not (isinstance(v, int) and v > 0):
                    fail(eid, f"{k} must be a positive int")
                if DEFAULT_SETTINGS.get(k) == v:
                    fail(eid, f"{k}={v} is already the default")

    # typo budget
    for eid, word in TYPOS.items():
        r = next((x for x in entries if x.get("id") == eid), None)
        if r is None or word not in r["query"]:
            fail(eid, f"declared typo {word!r} not found in the query")
    if len(TYPOS) * 10 > len(entries):
        fail("file", f"{len(TYPOS)} typos is more than 1 in 10")

    # shares
    total = len(entries)
    for v, (lo, hi) in VOICES.items():
        share = voice_count[v] / total
        if not lo <= share <= hi:
            fail("file", f"voice {v} share {share:.1%} outside {lo:.0%}-{hi:.0%}")
    for op, (lo, hi) in OP_SHARES.items():
        share = op_count[op] / total
        if not lo <= share <= hi:
            fail("file", f"operation {op} share {share:.1%} outside {lo:.0%}-{hi:.0%}")
    if not REFUSALS[0] <= op_count["refuse"] <= REFUSALS[1]:
        fail("file", f"{op_count['refuse']} refusals, want about 10")
    for frame, n in frames.items():
        if n > 3:
            fail("file", f"frame {frame!r} used {n} times (max 3)")

    if errors:
        print("\n".join(errors))
        print(f"FAIL: {len(errors)} problem(s)")
        return 1
    print(f"OK: {total} entries")
    print("voices:", dict(voice_count))
    print("operations:", dict(op_count))
    print("typos:", len(TYPOS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
