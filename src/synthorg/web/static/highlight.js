// A small syntax highlighter for diff lines: strings, comments, numbers and keywords of the
// common languages become classed spans of text (never HTML). Good enough to read a diff by;
// not a parser.
import { h } from "./dom.js";

const KEYWORDS = new Set(("and as assert async await break case catch class const continue def " +
  "default defer del delete do elif else enum except export extends false fn for from func go " +
  "if impl import in interface is lambda let loop match mod mut new nil none not null or package " +
  "pass pub raise return self static struct super switch this throw true try type typeof use var " +
  "while with yield").split(" "));
const TOKEN = /("(?:[^"\\]|\\.)*"?|'(?:[^'\\]|\\.)*'?|`[^`]*`?)|(#.*$|\/\/.*$)|\b(\d[\d_.xXa-fA-F]*)\b|([A-Za-z_][A-Za-z0-9_]*)/g;

export function highlight(code) {
  const out = [];
  let last = 0;
  for (const m of code.matchAll(TOKEN)) {
    if (m.index > last) out.push(code.slice(last, m.index));
    const [text, str, com, num, word] = m;
    if (str) out.push(h("span", { class: "tk-str" }, text));
    else if (com) out.push(h("span", { class: "tk-com" }, text));
    else if (num) out.push(h("span", { class: "tk-num" }, text));
    else if (word && KEYWORDS.has(word.toLowerCase()) && word === word.toLowerCase()) out.push(h("span", { class: "tk-kw" }, text));
    else out.push(text);
    last = m.index + text.length;
  }
  if (last < code.length) out.push(code.slice(last));
  return out;
}
