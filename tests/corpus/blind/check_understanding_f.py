#!/usr/bin/env python3
"""Validator for the blind set understanding_f.jsonl (blind writer f).

Checks the set against its fixture (conversation `default`, seqs 1-8, turns
1-4, nothing evicted, default settings) and against the brief: ids, voices,
operations, expect fields, verbatim stored text, expected turns, seq ranges,
shares per voice and per operation, refusals, typo share, frame repetition.
Run: python3 tests/corpus/blind/check_understanding_f.py
"""
import collections
import json
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
DATA = HERE / "understanding_f.jsonl"

# The fixture every query runs against (fresh copy each time).
FIXTURE = {
    1: ("user", 1, "What's the weather in Paris today?"),
    2: ("assistant", 1, "Paris is sunny, 24 degrees."),
    3: ("user", 2, "And tomorrow?"),
    4: ("assistant", 2, "Rain is expected in Paris tomorrow."),
    5: ("user", 3, "Book a table for two at 8pm."),
    6: ("assistant", 3, "Booked: Chez Marie, 8pm, two people."),
    7: ("user", 4, "What is our budget for the trip?"),
    8: ("assistant", 4, "The budget is 1200 euros."),
}
SEQS = set(FIXTURE)
NEXT_USER_TURN = 5      # a new user utterance opens turn 5
CURRENT_TURN = 4        # assistant/system without a turn join turn 4

VOICES = {"agent-formal": 0.35, "non-native": 0.25, "developer": 0.20, "hurried-human": 0.20}
OPS = {"store", "retrieve", "remove", "summarize", "configure", "mark", "stats"}
SPEAKERS = {"user", "assistant", "system"}
SETTINGS = {"buffer_size": int, "max_tokens": int, "eviction_batch": int,
            "summary_token_limit": int, "eviction_policy": str}
POLICIES = {"fifo", "importance"}
TOP_KEYS = {"id", "voice", "query", "metadata", "data", "expect"}
META_KEYS = {"conversation_id", "speaker", "turn_number"}
EXPECT_KEYS = {
    "store": {"operation", "stored"},
    "retrieve": {"operation", "seqs", "must_include", "must_exclude", "include_summary", "summary_only"},
    "remove": {"operation", "removed"},
    "summarize": {"operation"},
    "configure": {"operation", "settings"},
    "mark": {"operation", "important"},
    "stats": {"operation"},
}
# Every deliberate typo in the set (word as it appears in the query).
TYPOS = {"stroe", "hisotry", "wat", "tommorow", "delte", "evrything", "sumary",
         "breif", "answrs", "writen", "mentionned", "delet"}

errors = []


def err(eid, msg):
    errors.append(f"{eid}: {msg}")


def words(s):
    return re.findall(r"[a-z0-9\u00c0-\u024f]+", s.lower())


def check_seq_list(eid, name, lst, ascending=True):
    if not isinstance(lst, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in lst):
        err(eid, f"{name} must be a list of ints")
        return False
    if not set(lst) <= SEQS:
        err(eid, f"{name} references seqs outside the fixture: {sorted(set(lst) - SEQS)}")
    if len(set(lst)) != len(lst):
        err(eid, f"{name} has duplicates")
    if ascending and lst != sorted(lst):
        err(eid, f"{name} not ascending")
    return True


def main():
    lines = DATA.read_text(encoding="utf-8").splitlines()
    entries = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            err(f"line {n}", "blank line")
            continue
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError as exc:
            err(f"line {n}", f"bad JSON: {exc}")

    ids = [e.get("id") for e in entries]
    if len(set(ids)) != len(ids):
        err("set", "duplicate ids")
    for i, eid in enumerate(ids, 1):
        if eid != f"f-{i:03d}":
            err(eid, f"expected id f-{i:03d} at position {i}")

    by_voice = collections.Counter()
    by_op = collections.Counter()
    refusals = 0
    typo_hits = collections.Counter()
    frames = collections.Counter()
    queries = collections.Counter()

    for e in entries:
        eid = e.get("id", "?")
        if set(e) - TOP_KEYS:
            err(eid, f"unknown keys {sorted(set(e) - TOP_KEYS)}")
        for k in ("id", "voice", "query", "expect"):
            if k not in e:
                err(eid, f"missing {k}")
        voice, query, x = e.get("voice"), e.get("query", ""), e.get("expect", {})
        meta, data = e.get("metadata", {}), e.get("data", {})
        if voice not in VOICES:
            err(eid, f"unknown voice {voice!r}")
        by_voice[voice] += 1
        if not isinstance(query, str) or not query.strip():
            err(eid, "empty query")
        queries[query] += 1

        # metadata / data
        if set(meta) - META_KEYS:
            err(eid, f"unknown metadata keys {sorted(set(meta) - META_KEYS)}")
        if "speaker" in meta and meta["speaker"] not in SPEAKERS:
            err(eid, "bad metadata.speaker")
        if "conversation_id" in meta and meta["conversation_id"] != "default":
            err(eid, "fixture is conversation 'default'")
        if "turn_number" in meta and not (isinstance(meta["turn_number"], int) and meta["turn_number"] >= 0):
            err(eid, "bad metadata.turn_number")
        if "operation" in data:
            err(eid, "data.operation is not allowed")
        if set(data) - {"text", "token_limit"}:
            err(eid, f"unknown data keys {sorted(set(data) - {'text', 'token_limit'})}")
        if "token_limit" in data and not (isinstance(data["token_limit"], int) and data["token_limit"] > 0):
            err(eid, "bad data.token_limit")

        # typos
        qwords = set(words(query))
        hit = qwords & TYPOS
        for t in hit:
            typo_hits[t] += 1

        # frame: first four words with quoted material and numbers blanked
        frame_src = re.sub(r'"[^"]*"|\u201e[^\u201c]*\u201c|\u201c[^\u201d]*\u201d|\u00ab[^\u00bb]*\u00bb|\u300c[^\u300d]*\u300d|\[[^\]]*\]|`[^`]*`', " Q ", query)
        fw = [("#" if w.isdigit() else w) for w in words(frame_src)]
        frames[" ".join(fw[:4])] += 1

        if "error" in x:
            if x != {"error": "INVALID_ARGUMENT"}:
                err(eid, "a refusal has only error: INVALID_ARGUMENT")
            if meta or data:
                err(eid, "refusals carry no metadata/data in this set")
            refusals += 1
            by_op["refuse"] += 1
            continue

        op = x.get("operation")
        if op not in OPS:
            err(eid, f"unknown operation {op!r}")
            continue
        by_op[op] += 1
        if set(x) - EXPECT_KEYS[op]:
            err(eid, f"expect keys not allowed for {op}: {sorted(set(x) - EXPECT_KEYS[op])}")
        if "text" in data and op != "store":
            err(eid, "data.text only for stores")
        if "token_limit" in data and op != "summarize":
            err(eid, "data.token_limit only for summarize")
        if "turn_number" in meta and op != "store":
            err(eid, "metadata.turn_number only for stores")

        if op == "store":
            st = x.get("stored", {})
            if set(st) != {"text", "speaker", "turn_number"}:
                err(eid, "stored needs text, speaker, turn_number")
                continue
            text, spk, turn = st["text"], st["speaker"], st["turn_number"]
            if not text or text != text.strip():
                err(eid, "stored text empty or padded")
            if "text" in data:
                if data["text"] != text:
                    err(eid, "stored text differs from data.text")
            else:
                if text not in query:
                    err(eid, "stored text not verbatim in query")
            if spk not in SPEAKERS:
                err(eid, "bad stored speaker")
            if "speaker" in meta and meta["speaker"] != spk:
                err(eid, "stored speaker differs from metadata.speaker")
            # speaker named in the instruction (outside the utterance) must agree
            outside = query.replace(text, " ") if text in query else query
            ow = set(words(outside))
            named = set()
            if ow & {"assistant", "bot", "model's", "role"} or "the model replied" in outside or "model's reply" in outside:
                named.add("assistant")
            if "system" in ow:
                named.add("system")
            if named and spk not in named and "speaker" not in meta:
                err(eid, f"query names {sorted(named)} but stored speaker is {spk}")
            if "speaker" not in meta and spk == "user" and named:
                err(eid, "query names a non-user speaker but stored speaker is user")
            for t in TYPOS:
                if t in words(text):
                    err(eid, f"typo {t!r} inside the stored utterance")
            # expected turn
            if "turn_number" in meta:
                want = meta["turn_number"]
            else:
                m = re.search(r"\bturn(?:_number)?\s*[=:]?\s*(\d+)", outside)
                if m:
                    want = int(m.group(1))
                else:
                    want = NEXT_USER_TURN if spk == "user" else CURRENT_TURN
            if turn != want:
                err(eid, f"turn_number {turn}, expected {want}")

        elif op == "retrieve":
            has_seqs = "seqs" in x
            has_topic = "must_include" in x or "must_exclude" in x
            so = x.get("summary_only", False)
            if sum([has_seqs, has_topic, bool(so)]) != 1:
                err(eid, "retrieve needs exactly one of seqs, topic lists, summary_only")
            for k in ("include_summary", "summary_only"):
                if k in x and x[k] is not True:
                    err(eid, f"{k} must be true when present")
            if has_seqs:
                check_seq_list(eid, "seqs", x["seqs"])
                if not x["seqs"]:
                    err(eid, "empty seqs: nothing to measure")
                if "speaker" in meta:
                    for s in x["seqs"]:
                        if FIXTURE[s][0] != meta["speaker"]:
                            err(eid, f"seq {s} is not by {meta['speaker']}")
            if has_topic:
                inc, exc = x.get("must_include", []), x.get("must_exclude", [])
                check_seq_list(eid, "must_include", inc)
                check_seq_list(eid, "must_exclude", exc)
                if not inc:
                    err(eid, "topic search without must_include")
                if set(inc) & set(exc):
                    err(eid, "must_include and must_exclude overlap")
                # every must_include utterance shares a content word with the query
                qw = {w for w in words(query) if len(w) >= 4}
                for s in inc:
                    if not (set(words(FIXTURE[s][2])) & qw):
                        err(eid, f"must_include seq {s} shares no word with the query")
                if "speaker" in meta:
                    for s in inc:
                        if FIXTURE[s][0] != meta["speaker"]:
                            err(eid, f"must_include seq {s} is not by {meta['speaker']}")

        elif op == "remove":
            r = x.get("removed")
            if check_seq_list(eid, "removed", r) and not r:
                err(eid, "empty removed")

        elif op == "configure":
            s = x.get("settings")
            if not isinstance(s, dict) or not s:
                err(eid, "configure needs settings")
                continue
            for k, v in s.items():
                if k not in SETTINGS:
                    err(eid, f"unknown setting {k}")
                elif not isinstance(v, SETTINGS[k]) or isinstance(v, bool):
                    err(eid, f"setting {k} has the wrong type")
            if s.get("buffer_size", 8) < len(FIXTURE):
                err(eid, "buffer_size below the fixture would evict (not measured here)")
            if s.get("max_tokens", 8000) < 1000:
                err(eid, "max_tokens this low could evict")
            if "eviction_policy" in s and s["eviction_policy"] not in POLICIES:
                err(eid, "unknown eviction policy")

    total = len(entries)
    if total < 170:
        err("set", f"only {total} entries, need at least 170")

    # shares per voice (within 5 points of the brief)
    for v, share in VOICES.items():
        got = by_voice[v] / total
        if abs(got - share) > 0.05:
            err("set", f"voice {v}: {got:.1%}, brief says about {share:.0%}")
    # shares per operation
    want_ops = {"summarize": 0.15, "configure": 0.08, "remove": 0.20, "store": 0.25, "retrieve": 0.22}
    for op, share in want_ops.items():
        got = by_op[op] / total
        if abs(got - share) > 0.03:
            err("set", f"operation {op}: {got:.1%}, brief says about {share:.0%}")
    if not 8 <= refusals <= 12:
        err("set", f"{refusals} refusals, brief says about 10")

    # typos: each listed typo used exactly once, at most 1 in 10 queries
    for t in TYPOS:
        if typo_hits[t] != 1:
            err("set", f"typo {t!r} occurs in {typo_hits[t]} queries (want 1)")
    typo_queries = sum(1 for e in entries if set(words(e.get("query", ""))) & TYPOS)
    if typo_queries > total / 10:
        err("set", f"{typo_queries} queries with typos, max {total // 10}")

    for q, c in queries.items():
        if c > 1:
            err("set", f"duplicate query {q!r}")
    for f, c in frames.items():
        if c > 3:
            err("set", f"frame {f!r} used {c} times (max 3)")

    print(f"{total} entries")
    print("voices:", dict(sorted(by_voice.items())))
    print("operations:", dict(sorted(by_op.items())))
    print(f"typos: {typo_queries} queries ({typo_queries / total:.1%})")
    if errors:
        print(f"\n{len(errors)} problem(s):")
        for e in errors:
            print("  " + e)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
