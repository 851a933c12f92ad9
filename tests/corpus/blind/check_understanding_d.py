#!/usr/bin/env python3
"""Validate tests/corpus/blind/understanding_d.jsonl (blind set D, writer D2).

Checks: well-formed lines and allowed keys; unique ids; every stored.text
occurs verbatim in the query or in data.text and carries no surrounding quote
marks; every referenced seq is within the fixture (1..8) and lists are
ascending; operations, speakers and settings are valid; voice shares and
operation shares are as briefed; the typo share is at most 10%.

Run: python3 tests/corpus/blind/check_understanding_d.py
"""
import json
import os
import sys
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
PATH = os.path.join(HERE, "understanding_d.jsonl")

FIXTURE_SEQS = set(range(1, 9))
OPERATIONS = {"store", "retrieve", "remove", "summarize", "configure", "mark", "stats"}
SPEAKERS = {"user", "assistant", "system"}
TOP_KEYS = {"id", "voice", "query", "metadata", "data", "expect"}
META_KEYS = {"conversation_id", "speaker", "turn_number"}
EXPECT_KEYS = {"operation", "stored", "seqs", "must_include", "must_exclude", "removed",
               "settings", "important", "include_summary", "summary_only", "error"}
SETTINGS = {
    "buffer_size": lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
    "max_tokens": lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
    "eviction_batch": lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
    "summary_token_limit": lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
    "eviction_policy": lambda v: v in ("fifo", "importance"),
}
# Briefed voice shares (fraction of all entries) and tolerance.
VOICES = {"non-native": 0.35, "agent-formal": 0.30, "ops-engineer": 0.20, "busy-manager": 0.15}
VOICE_TOL = 0.03
# Entries that contain a deliberate typo, and the misspelt word.
TYPOS = {
    "d-042": "Jsut",
    "d-082": "agian",
    "d-084": "Whats",
    "d-120": "startng",
    "d-155": "teh",
    "d-158": "sumarize",
    "d-172": "mesages",
    "d-177": "importnat",
}
MAX_TYPO_SHARE = 0.10
MIN_ENTRIES = 170
QUOTES = "\"'\u201c\u201d\u2018\u2019\u00ab\u00bb\u300c\u300d"


def main():
    errors = []
    entries = []
    with open(PATH, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                errors.append(f"line {n}: empty line")
                continue
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError as exc:
                errors.append(f"line {n}: bad JSON: {exc}")

    def err(e, msg):
        errors.append(f"{e.get('id', '?')}: {msg}")

    def check_seqs(e, name, seqs, ascending=True, allow_empty=True):
        if not isinstance(seqs, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in seqs):
            err(e, f"{name} must be a list of integers")
            return
        if not seqs and not allow_empty:
            err(e, f"{name} is empty")
        bad = [s for s in seqs if s not in FIXTURE_SEQS]
        if bad:
            err(e, f"{name} references seqs outside 1..8: {bad}")
        if ascending and seqs != sorted(set(seqs)):
            err(e, f"{name} must be strictly ascending: {seqs}")

    ids = Counter(e.get("id") for e in entries)
    for i, c in ids.items():
        if c > 1:
            errors.append(f"duplicate id {i} ({c} times)")

    ops = Counter()
    for e in entries:
        extra = set(e) - TOP_KEYS
        if extra:
            err(e, f"unknown top-level keys {sorted(extra)}")
        if not isinstance(e.get("id"), str) or not e["id"].startswith("d-"):
            err(e, "id must be a string 'd-NNN'")
        if e.get("voice") not in VOICES:
            err(e, f"unknown voice {e.get('voice')!r}")
        q = e.get("query")
        if not isinstance(q, str) or not q.strip():
            err(e, "query must be a non-empty string")
            q = ""
        md = e.get("metadata", {})
        if not isinstance(md, dict) or set(md) - META_KEYS:
            err(e, f"metadata may only hold {sorted(META_KEYS)}")
            md = {}
        if "speaker" in md and md["speaker"] not in SPEAKERS:
            err(e, f"metadata.speaker invalid: {md['speaker']!r}")
        if "turn_number" in md and not (isinstance(md["turn_number"], int) and md["turn_number"] >= 0):
            err(e, "metadata.turn_number must be a whole number >= 0")
        data = e.get("data", {})
        if not isinstance(data, dict):
            err(e, "data must be an object")
            data = {}
        if "operation" in data:
            err(e, "data must never carry 'operation'")
        ex = e.get("expect")
        if not isinstance(ex, dict):
            err(e, "expect missing")
            continue
        extra = set(ex) - EXPECT_KEYS
        if extra:
            err(e, f"unknown expect keys {sorted(extra)}")

        if "error" in ex:
            if ex["error"] != "INVALID_ARGUMENT":
                err(e, f"error must be INVALID_ARGUMENT, got {ex['error']!r}")
            if set(ex) != {"error"}:
                err(e, "an error entry must carry only 'error'")
            ops["refused"] += 1
            continue

        op = ex.get("operation")
        if op not in OPERATIONS:
            err(e, f"invalid operation {op!r}")
            continue
        ops[op] += 1

        if op == "store":
            s = ex.get("stored")
            if not isinstance(s, dict) or set(s) != {"text", "speaker", "turn_number"}:
                err(e, "stored must have exactly text, speaker, turn_number")
            else:
                t = s["text"]
                if not isinstance(t, str) or not t:
                    err(e, "stored.text empty")
                elif t not in q and t not in str(data.get("text", "")):
                    err(e, f"stored.text not verbatim in query or data.text: {t!r}")
                elif t[0] in QUOTES and t[-1] in QUOTES:
                    err(e, f"stored.text still carries quote marks: {t!r}")
                elif t != t.strip():
                    err(e, "stored.text has surrounding whitespace")
                if s["speaker"] not in SPEAKERS:
                    err(e, f"stored.speaker invalid {s['speaker']!r}")
                if "speaker" in md and md["speaker"] != s["speaker"]:
                    err(e, "stored.speaker disagrees with metadata.speaker")
                if not (isinstance(s["turn_number"], int) and s["turn_number"] >= 0):
                    err(e, "stored.turn_number must be a whole number >= 0")
                if "turn_number" in md and md["turn_number"] != s["turn_number"]:
                    err(e, "stored.turn_number disagrees with metadata.turn_number")
            if "text" in data and ex.get("stored", {}).get("text") != data["text"]:
                err(e, "data.text given but stored.text differs from it")
        elif op == "retrieve":
            topic = "must_include" in ex
            if topic:
                if "seqs" in ex:
                    err(e, "a topic retrieve uses must_include, not seqs")
                check_seqs(e, "must_include", ex["must_include"], allow_empty=False)
                if "must_exclude" in ex:
                    check_seqs(e, "must_exclude", ex["must_exclude"], allow_empty=False)
                    if set(ex["must_include"]) & set(ex["must_exclude"]):
                        err(e, "must_include and must_exclude overlap")
            else:
                if "seqs" not in ex:
                    err(e, "a non-topic retrieve needs seqs")
                else:
                    check_seqs(e, "seqs", ex["seqs"])
                    if ex.get("summary_only"):
                        if ex["seqs"] != []:
                            err(e, "summary_only requires seqs == []")
                        if ex.get("include_summary"):
                            err(e, "summary_only and include_summary are exclusive")
                    elif not ex["seqs"]:
                        err(e, "empty seqs without summary_only")
            for k in ("include_summary", "summary_only"):
                if k in ex and ex[k] is not True:
                    err(e, f"{k} must be true when present")
        elif op == "remove":
            if "removed" not in ex:
                err(e, "remove needs 'removed'")
            else:
                check_seqs(e, "removed", ex["removed"], allow_empty=False)
        elif op == "configure":
            st = ex.get("settings")
            if not isinstance(st, dict) or not st:
                err(e, "configure needs non-empty settings")
            else:
                for k, v in st.items():
                    if k not in SETTINGS:
                        err(e, f"unknown setting {k!r}")
                    elif not SETTINGS[k](v):
                        err(e, f"invalid value for {k}: {v!r}")
        elif op == "mark":
            imp = ex.get("important")
            if not isinstance(imp, dict) or not imp:
                err(e, "mark needs 'important'")
            else:
                for k, v in imp.items():
                    if not k.isdigit() or int(k) not in FIXTURE_SEQS:
                        err(e, f"important references seq outside 1..8: {k!r}")
                    if not isinstance(v, bool):
                        err(e, "important values must be booleans")
        elif op == "summarize":
            if "token_limit" in data and not (isinstance(data["token_limit"], int) and data["token_limit"] > 0):
                err(e, "data.token_limit must be a positive integer")
        # keys that belong to other operations
        allowed = {"store": {"stored"}, "retrieve": {"seqs", "must_include", "must_exclude", "include_summary", "summary_only"},
                   "remove": {"removed"}, "configure": {"settings"}, "mark": {"important"},
                   "summarize": set(), "stats": set()}[op] | {"operation"}
        stray = set(ex) - allowed
        if stray:
            err(e, f"keys {sorted(stray)} do not belong to operation {op}")

    n = len(entries)
    if n < MIN_ENTRIES:
        errors.append(f"only {n} entries, need at least {MIN_ENTRIES}")

    voices = Counter(e.get("voice") for e in entries)
    for v, share in VOICES.items():
        got = voices[v] / n if n else 0
        if abs(got - share) > VOICE_TOL:
            errors.append(f"voice {v}: {voices[v]} entries = {got:.1%}, briefed ~{share:.0%}")

    by_id = {e.get("id"): e for e in entries}
    for i, word in TYPOS.items():
        if i not in by_id:
            errors.append(f"typo list names unknown id {i}")
        elif word not in by_id[i]["query"]:
            errors.append(f"{i}: typo word {word!r} not in query")
    if n and len(TYPOS) / n > MAX_TYPO_SHARE:
        errors.append(f"typo share {len(TYPOS)}/{n} above {MAX_TYPO_SHARE:.0%}")

    # Operation weights as briefed (approximate).
    want = {"summarize": (0.13, 0.17), "configure": (0.07, 0.10), "remove": (0.18, 0.22),
            "store": (0.23, 0.27), "retrieve": (0.20, 0.24)}
    for op, (lo, hi) in want.items():
        got = ops[op] / n if n else 0
        if not lo <= got <= hi:
            errors.append(f"operation {op}: {ops[op]} = {got:.1%}, briefed {lo:.0%}-{hi:.0%}")
    if not 8 <= ops["refused"] <= 12:
        errors.append(f"refused (ambiguous destructive) entries: {ops['refused']}, briefed about 10")
    for op in OPERATIONS:
        if ops[op] == 0:
            errors.append(f"operation {op} not covered")

    print(f"{n} entries")
    print("operations:", dict(sorted(ops.items())))
    print("voices:", dict(sorted(voices.items())))
    print(f"typos: {len(TYPOS)} ({len(TYPOS) / n:.1%})" if n else "typos: 0")
    if errors:
        print(f"\n{len(errors)} problem(s):")
        for m in errors:
            print("  -", m)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
