#!/usr/bin/env python3
"""Validate the blind evaluation conversations in this folder.

Every *.jsonl file next to this script is checked. One JSON object a line:

  {"speaker": "user"|"assistant"|"system",
   "text": "...",
   "facts": [{"fact": "...", "anchor": "..."}],
   "superseded": ["..."],
   "corrects": [{"old": "...", "new": "...", "anchor": "..."}]}

Checks (errors make the script exit with status 1):
  * valid JSON, valid speaker, non-empty text;
  * every fact and its anchor are verbatim substrings of the text; a fact is 1-6 words;
  * every superseded value is a verbatim substring of the text, and a LATER utterance
    corrects it (corrects.old == the value);
  * every correction: "new" and "anchor" are verbatim in the text, "new" is also listed
    in "facts" of the same utterance, "old" was listed as "superseded" in an EARLIER utterance;
    if "old" also occurs in the correcting text that is fine, it is not required;
  * at least --min-utterances utterances (default 560);
  * the share of utterances with at least one fact lies in [--min-share, --max-share]
    (default 0.30 .. 0.40);
  * at least one correction per --episode-len utterances (default 30), i.e. about one
    correction per episode;
  * no sentence frame occurs more than --max-frame times (default 3). A frame is the text
    with digit runs masked to "0" and capitalised words masked to "W", whitespace collapsed;
  * multi-party files (where most "user" utterances start with "Name: ") must prefix
    every "user" utterance that way.

Warnings (printed, not fatal): a value marked superseded twice; a superseded value that is
also kept as a fact elsewhere, or that contains / is contained in a kept fact (a summary
check by substring could not tell them apart).

Usage: python3 check_conversations.py [files...]   (default: every *.jsonl here)
"""
import argparse
import collections
import glob
import json
import os
import re
import sys

SPEAKERS = {"user", "assistant", "system"}
NAME_PREFIX = re.compile(r"^(?:(?:Dr|Mr|Ms|Mrs)\. )?[A-Z][\w'’.-]*(?: [A-Z][\w'’.-]*){0,3}: ")
DIGITS = re.compile(r"\d+(?:[.,:/-]\d+)*")
CAPWORD = re.compile(r"(?<![\w'’])[A-Z][\w'’-]*")


def frame_of(text):
    t = DIGITS.sub("0", text)
    t = CAPWORD.sub("W", t)
    return re.sub(r"\s+", " ", t).strip()


def check_file(path, args):
    errors = []
    warnings = []
    rows = []
    with open(path, encoding="utf-8") as fh:
        for ln, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            try:
                rows.append((ln, json.loads(raw)))
            except json.JSONDecodeError as exc:
                errors.append(f"line {ln}: invalid JSON ({exc})")

    kept_facts = {}               # fact value -> first line where it is a kept fact
    superseded_seen = {}          # value -> first line where it was marked superseded
    corrected_olds = collections.defaultdict(list)   # value -> lines of corrections
    n_facts = 0
    n_with_facts = 0
    n_corr = 0
    frames = collections.Counter()
    frame_example = {}
    speakers = collections.Counter()
    user_texts = []

    for ln, obj in rows:
        where = f"line {ln}"
        if not isinstance(obj, dict):
            errors.append(f"{where}: not a JSON object")
            continue
        sp = obj.get("speaker")
        text = obj.get("text")
        if sp not in SPEAKERS:
            errors.append(f"{where}: invalid speaker {sp!r}")
        if not isinstance(text, str) or not text.strip():
            errors.append(f"{where}: missing or empty text")
            continue
        speakers[sp] += 1
        if sp == "user":
            user_texts.append((ln, text))
        facts = obj.get("facts", [])
        sups = obj.get("superseded", [])
        corrs = obj.get("corrects", [])
        for key, val in (("facts", facts), ("superseded", sups), ("corrects", corrs)):
            if not isinstance(val, list):
                errors.append(f"{where}: {key} must be a list")
        if not isinstance(facts, list) or not isinstance(sups, list) or not isinstance(corrs, list):
            continue

        fact_values = []
        for f in facts:
            if not isinstance(f, dict) or not isinstance(f.get("fact"), str) or not isinstance(f.get("anchor"), str):
                errors.append(f"{where}: malformed fact {f!r}")
                continue
            fv, an = f["fact"], f["anchor"]
            fact_values.append(fv)
            if not fv.strip() or fv not in text:
                errors.append(f"{where}: fact {fv!r} not verbatim in text")
            if not an.strip() or an not in text:
                errors.append(f"{where}: anchor {an!r} (fact {fv!r}) not verbatim in text")
            nw = len(fv.split())
            if nw < 1 or nw > 6:
                errors.append(f"{where}: fact {fv!r} has {nw} words (want 1-6)")
        if fact_values:
            n_with_facts += 1
            n_facts += len(fact_values)

        for s in sups:
            if not isinstance(s, str) or not s.strip() or s not in text:
                errors.append(f"{where}: superseded {s!r} not verbatim in text")
                continue
            if s in fact_values:
                errors.append(f"{where}: {s!r} is both a fact and superseded")

        for c in corrs:
            if not isinstance(c, dict) or not all(isinstance(c.get(k), str) for k in ("old", "new", "anchor")):
                errors.append(f"{where}: malformed correction {c!r}")
                continue
            n_corr += 1
            if c["new"] not in text:
                errors.append(f"{where}: correction new {c['new']!r} not verbatim in text")
            if c["anchor"] not in text:
                errors.append(f"{where}: correction anchor {c['anchor']!r} not verbatim in text")
            if c["new"] not in fact_values:
                errors.append(f"{where}: correction new {c['new']!r} not listed in facts")
            if c["old"] not in superseded_seen:
                errors.append(f"{where}: correction old {c['old']!r} was not marked superseded in an earlier utterance")
            if c["old"] == c["new"]:
                errors.append(f"{where}: correction old == new ({c['old']!r})")
            corrected_olds[c["old"]].append(ln)

        # register superseded values after the corrections of this line
        for s in sups:
            if isinstance(s, str):
                if s in superseded_seen:
                    warnings.append(f"line {ln}: superseded value {s!r} was already superseded at line {superseded_seen[s]} (ambiguous)")
                superseded_seen.setdefault(s, ln)
        for fv in fact_values:
            kept_facts.setdefault(fv, ln)

        fr = frame_of(text)
        frames[fr] += 1
        frame_example.setdefault(fr, ln)

    for s, first in superseded_seen.items():
        for fv, fl in kept_facts.items():
            if fv != s and (s in fv or fv in s):
                warnings.append(f"superseded value {s!r} (line {first}) and kept fact {fv!r} (line {fl}) contain one another; substring checks on a summary would be ambiguous")
        if s in kept_facts:
            warnings.append(f"superseded value {s!r} (line {first}) is also kept as a fact (line {kept_facts[s]}); a check for dropped values would be ambiguous")
        if not any(l > first for l in corrected_olds.get(s, [])):
            errors.append(f"line {first}: superseded {s!r} is never corrected later")

    for fr, n in frames.items():
        if n > args.max_frame:
            errors.append(f"frame repeated {n}x (first at line {frame_example[fr]}): {fr!r}")

    n = sum(speakers.values())
    if n < args.min_utterances:
        errors.append(f"only {n} utterances (want >= {args.min_utterances})")
    share = n_with_facts / n if n else 0.0
    if not (args.min_share <= share <= args.max_share):
        errors.append(f"share of utterances with facts {share:.1%} outside [{args.min_share:.0%}, {args.max_share:.0%}]")
    need_corr = n / args.episode_len if n else 0
    if n_corr < need_corr:
        errors.append(f"only {n_corr} corrections (want >= {need_corr:.0f}, one per {args.episode_len} utterances)")

    prefixed = [t for _, t in user_texts if NAME_PREFIX.match(t)]
    multi = bool(user_texts) and len(prefixed) > 0.8 * len(user_texts)
    if multi:
        names = collections.Counter(NAME_PREFIX.match(t).group(0)[:-2] for t in prefixed)
        for ln, t in user_texts:
            if not NAME_PREFIX.match(t):
                errors.append(f"line {ln}: multi-party file but user text lacks 'Name: ' prefix")
    else:
        names = collections.Counter()

    stats = {
        "utterances": n,
        "speakers": dict(speakers),
        "facts": n_facts,
        "utterances_with_facts": n_with_facts,
        "fact_share": round(share, 3),
        "corrections": n_corr,
        "superseded": len(superseded_seen),
        "distinct_frames": len(frames),
        "max_frame_repeat": max(frames.values()) if frames else 0,
        "multi_party": multi,
        "human_speakers": len(names),
    }
    return errors, warnings, stats


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*")
    ap.add_argument("--min-utterances", type=int, default=560)
    ap.add_argument("--min-share", type=float, default=0.30)
    ap.add_argument("--max-share", type=float, default=0.40)
    ap.add_argument("--episode-len", type=int, default=30)
    ap.add_argument("--max-frame", type=int, default=3)
    ap.add_argument("--max-errors", type=int, default=40, help="errors printed per file")
    args = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    files = args.files or sorted(glob.glob(os.path.join(here, "*.jsonl")))
    if not files:
        print("no .jsonl files found")
        return 1
    failed = False
    for path in files:
        errors, warnings, stats = check_file(path, args)
        status = "OK" if not errors else f"FAIL ({len(errors)} errors)"
        print(f"{os.path.basename(path)}: {status}")
        print("  " + json.dumps(stats))
        for e in errors[: args.max_errors]:
            print("  ERROR " + e)
        if len(errors) > args.max_errors:
            print(f"  ... {len(errors) - args.max_errors} more errors")
        for w in warnings:
            print("  warning " + w)
        failed = failed or bool(errors)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
