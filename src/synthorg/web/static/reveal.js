// Invisible and control characters made visible: the console's one rule for them. A bidi
// override can make a command read differently from what runs (Trojan Source), a zero-width
// character can hide in a name, a control character can hide in an argument: each is shown as
// its \xNN / \uNNNN escape in a marked span, and counted so the view can flag it. Mirrors
// synthorg.cli.untrusted (the CLI's rule) character for character.
import { h } from "./dom.js";

// C0 except tab and newline, DEL, C1, soft hyphen, combining grapheme joiner, Arabic letter
// mark, Hangul fillers, Khmer and Mongolian invisibles, zero-width and bidi marks, line and
// paragraph separators, embeddings, overrides and isolates, word joiner and invisible
// operators, variation selectors, BOM, interlinear annotations, musical format controls,
// tags, lone surrogates.
const HIDDEN = new RegExp("[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f\\u00ad\\u034f\\u061c\\u115f\\u1160" +
  "\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u3164\\ufe00-\\ufe0f" +
  "\\ufeff\\uffa0\\ufff9-\\ufffb\\u{1d173}-\\u{1d17a}\\u{e0000}-\\u{e0fff}\\ud800-\\udfff]", "gu");

function escape(ch) {
  const code = ch.codePointAt(0);
  return code <= 0xff ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`;
}

// The parts of ``text`` for h(): plain strings, and a span per hidden character showing its
// escape. The array's ``hidden`` property counts them.
export function reveal(text) {
  const s = String(text);
  const parts = [];
  let last = 0;
  let hidden = 0;
  for (const m of s.matchAll(HIDDEN)) {
    if (m.index > last) parts.push(s.slice(last, m.index));
    parts.push(h("span", { class: "esc", title: "invisible or control character" }, escape(m[0])));
    hidden += 1;
    last = m.index + m[0].length;
  }
  if (last < s.length) parts.push(s.slice(last));
  parts.hidden = hidden;
  return parts;
}

export function hasHidden(text) {
  HIDDEN.lastIndex = 0;
  const found = HIDDEN.test(String(text));
  HIDDEN.lastIndex = 0;
  return found;
}

// The flag shown above what holds hidden characters (null when there are none).
export function hiddenFlag(count) {
  if (!count) return null;
  return h("p", { class: "hidden-flag", role: "alert" },
    `⚠ ${count} invisible, bidirectional or control character${count === 1 ? "" : "s"}: ` +
    "shown as \\x/\\u escapes. What runs may read differently from how it looks elsewhere.");
}
