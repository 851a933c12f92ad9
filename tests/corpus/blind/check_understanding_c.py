#!/usr/bin/env python3
"""Validate understanding_c.jsonl (blind set C, writer C2).

Run: python3 tests/corpus/blind/check_understanding_c.py
Exits 0 when every check passes, 1 otherwise (each problem is printed).
"""
import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "understanding_c.jsonl"

SEQS = set(range(1, 9))  # the fixture: seqs 1..8
OPERATIONS = {"store", "retrieve", "remove", "summarize", "configure", "mark", "stats"}
SPEAKERS = {"user", "assistant", "system"}
TOP_KEYS = {"id", "voice", "query", "metadata", "data", "expect"}
META_KEYS = {"conversation_id", "speaker", "turn_number"}
EXPECT_KEYS = {"operation", "stored", "seqs", "must_include", "must_exclude", "removed",
               "settings", "important", "include_summary", "summary_only", "error"}
SETTING_KEYS = {"buffer_size", "max_tokens", "eviction_batch", "summary_token_limit", "eviction_policy"}
POLICIES = {"fifo", "importance"}
VOICE_SHARE = {"non-native": 0.30, "agent-json": 0.25, "clinic-or-support": 0.25, "casual-typist": 0.20}
VOICE_TOLERANCE = 0.03
OP_SHARE = {"store": 0.32, "retrieve": 0.33, "remove": 0.20, "summarize": 0.08}
OP_TOLERANCE = 0.04
# entries whose query carries a deliberate typo (misspelt word -> id)
TYPO_IDS = {"c-048": "wat", "c-074": "everthing", "c-091": "sav", "c-095": "teh",
            "c-119": "teh", "c-137": "Plese", "c-151": "sumarize", "c-162": "delte"}
TYPO_WORDS = {w.lower() for w in TYPO_IDS.values()}
MAX_TYPO_SHARE = 0.10
OPEN_Q = "\"'“„«‹「‘"
CLOSE_Q = "\"'”“»›」’"

problems = []


def bad(eid, msg):
    problems.append(f"{eid}: {msg}")


def check_seq_list(eid, name, value, allow_empty=True):
    if not isinstance(value, list) or (not value and not allow_empty):
        bad(eid, f"{name} must be a{'' if allow_empty else ' non-empty'} list")
        return
    for s in value:
        if not isinstance(s, int) or isinstance(s, bool) or s not in SEQS:
            bad(eid, f"{name} references seq {s!r} outside 1..8")
    if value != sorted(set(value)):
        bad(eid, f"{name} must be ascending without duplicates: {value}")


def check_boundaries(eid, source, text):
    """The stored text must stand apart from the instruction around it."""
    i = source.find(text)
    before = source[:i]
    after = source[i + len(text):]
    if before and not (before[-1] in OPEN_Q or before.rstrip().endswith(":") or before.endswith("\n")):
        bad(eid, f"stored text not introduced by a quote, colon or line break: ...{before[-15:]!r}")
    if after and not (after[0] in CLOSE_Q or re.match(r"\s+(\(|—|-|to turn)", after)):
        bad(eid, f"stored text not closed by a quote, end, bracket or dash: {after[:15]!r}...")
    if text[:1] in OPEN_Q + CLOSE_Q or text[-1:] in OPEN_Q + CLOSE_Q:
        bad(eid, "stored text starts or ends with a quote mark")
    if text != text.strip():
        bad(eid, "stored text has surrounding whitespace")


def main():
    entries = []
    for n, line in enumerate(CORPUS.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            bad(f"line {n}", "empty line")
            continue
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError as exc:
            bad(f"line {n}", f"not JSON: {exc}")

    if len(entries) < 170:
        bad("corpus", f"only {len(entries)} entries, need at least 170")

    ids = Counter(e.get("id") for e in entries)
    for eid, c in ids.items():
        if c > 1:
            bad(eid, f"id used {c} times")
        if not re.fullmatch(r"c-\d{3}", str(eid)):
            bad(eid, "id must look like c-001")

    ops = Counter()
    voices = Counter()
    errors = 0
    for e in entries:
        eid = e.get("id", "?")
        extra = set(e) - TOP_KEYS
        if extra:
            bad(eid, f"unknown keys {sorted(extra)}")
        for k in ("id", "voice", "query", "expect"):
            if k not in e:
                bad(eid, f"missing {k}")
        q = e.get("query", "")
        if not isinstance(q, str) or not q.strip():
            bad(eid, "empty query")
        voice = e.get("voice")
        if voice not in VOICE_SHARE:
            bad(eid, f"unknown voice {voice!r}")
        voices[voice] += 1

        meta = e.get("metadata", {})
        if set(meta) - META_KEYS:
            bad(eid, f"metadata keys {sorted(set(meta) - META_KEYS)} not allowed")
        if "speaker" in meta and meta["speaker"] not in SPEAKERS:
            bad(eid, f"metadata.speaker {meta['speaker']!r}")
        if "turn_number" in meta and (not isinstance(meta["turn_number"], int) or meta["turn_number"] < 0):
            bad(eid, "metadata.turn_number must be a whole number >= 0")
        if "conversation_id" in meta and meta["conversation_id"] != "default":
            bad(eid, "the fixture conversation is 'default'")
        data = e.get("data", {})
        if "operation" in data:
            bad(eid, "data.operation is not allowed (the query must be parsed)")
        if set(data) - {"text"}:
            bad(eid, f"data keys {sorted(set(data) - {'text'})}: only text is used")

        ex = e.get("expect", {})
        if set(ex) - EXPECT_KEYS:
            bad(eid, f"unknown expect keys {sorted(set(ex) - EXPECT_KEYS)}")
        op = ex.get("operation")
        if "error" in ex:
            errors += 1
            if ex["error"] != "INVALID_ARGUMENT":
                bad(eid, f"error must be INVALID_ARGUMENT, got {ex['error']!r}")
            if op is not None:
                bad(eid, "an error entry carries no operation")
            if set(ex) != {"error"}:
                bad(eid, "an error entry expects nothing else")
            ops["remove (refusal)"] += 1
            if not re.search(r"\b(delete|remove|erase|drop|clean|wipe|forget|purge)\b", q, re.I) \
                    and '"remove"' not in q:
                bad(eid, "refusals here are for destructive requests only")
            continue
        if op not in OPERATIONS:
            bad(eid, f"operation {op!r} invalid")
            continue
        ops[op] += 1
        allowed = {
            "store": {"operation", "stored"},
            "retrieve": {"operation", "seqs", "must_include", "must_exclude", "include_summary", "summary_only"},
            "remove": {"operation", "removed"},
            "summarize": {"operation"},
            "configure": {"operation", "settings"},
            "mark": {"operation", "important"},
            "stats": {"operation"},
        }[op]
        if set(ex) - allowed:
            bad(eid, f"{op} does not take {sorted(set(ex) - allowed)}")

        if op == "store":
            st = ex.get("stored")
            if not isinstance(st, dict) or set(st) != {"text", "speaker", "turn_number"}:
                bad(eid, "stored needs exactly text, speaker, turn_number")
                continue
            if st["speaker"] not in SPEAKERS:
                bad(eid, f"stored.speaker {st['speaker']!r}")
            if not isinstance(st["turn_number"], int) or st["turn_number"] < 0:
                bad(eid, "stored.turn_number must be a whole number")
            text = st["text"]
            if not text:
                bad(eid, "stored.text empty")
            elif "text" in data:
                if data["text"] != text:
                    bad(eid, "data.text given but stored.text differs from it")
            elif text not in q:
                bad(eid, "stored.text does not occur verbatim in the query")
            else:
                check_boundaries(eid, q, text)
            if "speaker" in meta and meta["speaker"] != st["speaker"]:
                bad(eid, "metadata.speaker disagrees with stored.speaker")
            if "turn_number" in meta and meta["turn_number"] != st["turn_number"]:
                bad(eid, "metadata.turn_number disagrees with stored.turn_number")
            # fixture rule: no explicit turn -> user opens 5, assistant/system join 4
            explicit_turn = "turn_number" in meta or re.search(r"\bturn(_number)?\b[\s:=]*\d", q.replace(text, ""))
            if not explicit_turn:
                want = 5 if st["speaker"] == "user" else 4
                if st["turn_number"] != want:
                    bad(eid, f"without an explicit turn a {st['speaker']} store goes to turn {want}")
        elif op == "retrieve":
            topic = "must_include" in ex
            if topic:
                check_seq_list(eid, "must_include", ex["must_include"], allow_empty=False)
                if "must_exclude" in ex:
                    check_seq_list(eid, "must_exclude", ex["must_exclude"], allow_empty=False)
                    if set(ex["must_include"]) & set(ex["must_exclude"]):
                        bad(eid, "a seq is both included and excluded")
                if "seqs" in ex:
                    bad(eid, "topic searches use must_include, not seqs")
            else:
                if "seqs" not in ex:
                    bad(eid, "a non-topic retrieve needs seqs")
                else:
                    check_seq_list(eid, "seqs", ex["seqs"])
                if "must_exclude" in ex:
                    bad(eid, "must_exclude only with must_include")
            if ex.get("summary_only"):
                if ex.get("seqs") != []:
                    bad(eid, "summary_only expects seqs []")
                if ex.get("include_summary"):
                    bad(eid, "summary_only and include_summary together")
            elif "seqs" in ex and ex["seqs"] == []:
                bad(eid, "empty seqs without summary_only")
            for flag in ("include_summary", "summary_only"):
                if flag in ex and ex[flag] is not True:
                    bad(eid, f"{flag} is given only as true")
        elif op == "remove":
            check_seq_list(eid, "removed", ex.get("removed"), allow_empty=False)
        elif op == "configure":
            s = ex.get("settings")
            if not isinstance(s, dict) or not s:
                bad(eid, "configure needs settings")
                continue
            for k, v in s.items():
                if k not in SETTING_KEYS:
                    bad(eid, f"setting {k!r} unknown")
                elif k == "eviction_policy":
                    if v not in POLICIES:
                        bad(eid, f"eviction_policy {v!r}")
                elif not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                    bad(eid, f"{k} must be a positive whole number")
                if k != "eviction_policy" and str(v) not in q:
                    bad(eid, f"setting value {v} not in the query")
        elif op == "mark":
            imp = ex.get("important")
            if not isinstance(imp, dict) or not imp:
                bad(eid, "mark needs important")
                continue
            for k, v in imp.items():
                if not k.isdigit() or int(k) not in SEQS:
                    bad(eid, f"important key {k!r} is not a seq 1..8")
                if not isinstance(v, bool):
                    bad(eid, "important values are true/false")

    total = len(entries)
    # voice shares
    for v, share in VOICE_SHARE.items():
        got = voices[v] / total if total else 0
        if abs(got - share) > VOICE_TOLERANCE:
            bad("corpus", f"voice {v}: {got:.1%}, expected about {share:.0%}")
    # operation shares (refusals count with remove)
    for op, share in OP_SHARE.items():
        n = ops[op] + (ops["remove (refusal)"] if op == "remove" else 0)
        if abs(n / total - share) > OP_TOLERANCE:
            bad("corpus", f"operation {op}: {n / total:.1%}, expected about {share:.0%}")
    for op in ("configure", "mark", "stats"):
        if ops[op] == 0:
            bad("corpus", f"no {op} entries")
    if not 6 <= errors <= 10:
        bad("corpus", f"{errors} refusals, expected about 8")
    # typos
    by_id = {e.get("id"): e for e in entries}
    for eid in TYPO_IDS:
        if eid not in by_id:
            bad(eid, "listed as typo but missing")
        elif not re.search(rf"\b{re.escape(TYPO_IDS[eid])}\b", by_id[eid]["query"]):
            bad(eid, f"listed typo {TYPO_IDS[eid]!r} not in the query")
    for e in entries:
        words = {w.lower() for w in re.findall(r"[A-Za-z]+", e.get("query", ""))}
        if words & TYPO_WORDS and e.get("id") not in TYPO_IDS:
            bad(e.get("id"), f"has a typo {sorted(words & TYPO_WORDS)} but is not listed in TYPO_IDS")
    if len(TYPO_IDS) / total > MAX_TYPO_SHARE:
        bad("corpus", f"typo share {len(TYPO_IDS) / total:.1%} over {MAX_TYPO_SHARE:.0%}")

    print(f"{total} entries")
    print("operations:", dict(sorted(ops.items())))
    print("voices:", dict(sorted(voices.items())))
    print(f"typos: {len(TYPO_IDS)} ({len(TYPO_IDS) / total:.1%})")
    if problems:
        print(f"\n{len(problems)} problem(s):")
        for p in problems:
            print("  " + p)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
