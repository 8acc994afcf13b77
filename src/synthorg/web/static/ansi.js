// Terminal output to DOM: SGR colours and styles become classes on text spans; carriage
// return, backspace, cursor up/down/forward/back, column and erase-in-line are applied to the
// text as a terminal would (screen.js); every other escape sequence (OSC 52 clipboard
// writes, title changes, absolute positioning, DCS/APC/PM/SOS strings, 8-bit C1 controls) and
// control character is dropped, so output is inert text; invisible and bidi characters are
// revealed as escapes (reveal.js).
import { h, append } from "./dom.js";
import { reveal } from "./reveal.js";
import { Screen } from "./screen.js";

const ESC = "\x1b";

function sgr(state, params) {
  const codes = params === "" ? [0] : params.split(/[;:]/).map((p) => (p === "" ? 0 : Number(p)));
  for (let i = 0; i < codes.length; i++) {
    const c = codes[i];
    if (!Number.isInteger(c)) continue;
    if (c === 0) Object.assign(state, { fg: null, bg: null, bold: false, italic: false, underline: false, fgRgb: null, bgRgb: null });
    else if (c === 1) state.bold = true;
    else if (c === 3) state.italic = true;
    else if (c === 4) state.underline = true;
    else if (c === 22) state.bold = false;
    else if (c === 23) state.italic = false;
    else if (c === 24) state.underline = false;
    else if (c >= 30 && c <= 37) Object.assign(state, { fg: c - 30, fgRgb: null });
    else if (c >= 90 && c <= 97) Object.assign(state, { fg: c - 90 + 8, fgRgb: null });
    else if (c === 39) Object.assign(state, { fg: null, fgRgb: null });
    else if (c >= 40 && c <= 47) Object.assign(state, { bg: c - 40, bgRgb: null });
    else if (c >= 100 && c <= 107) Object.assign(state, { bg: c - 100 + 8, bgRgb: null });
    else if (c === 49) Object.assign(state, { bg: null, bgRgb: null });
    else if ((c === 38 || c === 48) && codes[i + 1] === 5) {
      const n = codes[i + 2];
      const key = c === 38 ? "fg" : "bg";
      if (Number.isInteger(n) && n >= 0 && n < 16) Object.assign(state, { [key]: n, [key + "Rgb"]: null });
      else if (Number.isInteger(n) && n < 256) Object.assign(state, { [key]: null, [key + "Rgb"]: xterm256(n) });
      i += 2;
    } else if ((c === 38 || c === 48) && codes[i + 1] === 2) {
      const rgb = codes.slice(i + 2, i + 5);
      const key = c === 38 ? "fg" : "bg";
      if (rgb.length === 3 && rgb.every((v) => Number.isInteger(v) && v >= 0 && v < 256)) {
        Object.assign(state, { [key]: null, [key + "Rgb"]: rgb });
      }
      i += 4;
    }
  }
}

function xterm256(n) {
  if (n >= 232) {
    const v = 8 + (n - 232) * 10;
    return [v, v, v];
  }
  const i = n - 16;
  const level = (x) => (x === 0 ? 0 : 55 + x * 40);
  return [level(Math.floor(i / 36)), level(Math.floor(i / 6) % 6), level(i % 6)];
}

function span(state, text) {
  const classes = [];
  if (state.fg !== null) classes.push(`fg${state.fg}`);
  if (state.bg !== null) classes.push(`bg${state.bg}`);
  if (state.bold) classes.push("b");
  if (state.italic) classes.push("i");
  if (state.underline) classes.push("u");
  const parts = reveal(text);
  if (!classes.length && !state.fgRgb && !state.bgRgb) return parts;
  const el = h("span", classes.length ? { class: classes.join(" ") } : {}, parts);
  // CSSOM (not a style attribute): allowed by the CSP, and only numbers reach it.
  if (state.fgRgb) el.style.color = `rgb(${state.fgRgb.join(",")})`;
  if (state.bgRgb) el.style.backgroundColor = `rgb(${state.bgRgb.join(",")})`;
  return el;
}

// Printable text only: tab kept; newline, carriage return and backspace move the cursor;
// other C0, DEL and C1 controls are dropped.
const CONTROL = /[\x00-\x07\x0b\x0c\x0e-\x1f\x7f-\x9f]/;

const MOVES = { A: "up", B: "down", C: "forward", D: "back" };

// The output's text as a terminal would leave it (screen.js), in styled spans; the fragment's
// ``redrawn`` says that cursor movement replaced or erased text already written.
export function renderAnsi(input) {
  const text = String(input);
  const out = document.createDocumentFragment();
  const state = { fg: null, bg: null, bold: false, italic: false, underline: false, fgRgb: null, bgRgb: null };
  const screen = new Screen();
  let style = { ...state };
  let i = 0;
  while (i < text.length) {
    const ch = text[i];
    const csi = ch === "\x9b" || (ch === ESC && text[i + 1] === "[");
    const str = ch === "\x9d" || ch === "\x90" || ch === "\x98" || ch === "\x9e" || ch === "\x9f" ||
      (ch === ESC && "]P^_X".includes(text[i + 1] || "\0"));
    if (csi) {
      let j = i + (ch === ESC ? 2 : 1);
      let params = "";
      while (j < text.length && /[\x30-\x3f]/.test(text[j])) params += text[j++];
      while (j < text.length && /[\x20-\x2f]/.test(text[j])) j++;
      const final = text[j];
      const n = /^[0-9]*$/.test(params) ? Math.min(Number(params || 1), 10000) : null;
      if (final === "m" && /^[0-9;:]*$/.test(params)) {
        sgr(state, params);
        style = { ...state };
      } else if (MOVES[final] && n !== null) screen[MOVES[final]](n);
      else if (final === "G" && n !== null) screen.column(n);
      else if (final === "K" && /^[012]?$/.test(params)) screen.erase(Number(params || 0));
      i = j + 1; // any other CSI (absolute position, erase display, modes) is dropped
    } else if (str) {
      // OSC / DCS / SOS / PM / APC: skipped through BEL or ST (ESC \ or 0x9c), never acted
      // on. One not terminated before its line ends (or the next ESC, CAN, SUB) loses only its
      // introducer and the rest is shown as text: a stray introducer must not hide the output
      // after it (a test's FAILED line, the tool's exit code note).
      const start = i + (ch === ESC ? 2 : 1);
      let j = start;
      while (j < text.length && !"\x07\x9c\x1b\x18\x1a\n".includes(text[j])) j++;
      if (text[j] === ESC && text[j + 1] === "\\") i = j + 2;
      else if (text[j] === "\x07" || text[j] === "\x9c") i = j + 1;
      else i = start;
    } else if (ch === ESC) {
      i += 2; // a two-character escape (ESC c, ESC 7, ...): dropped
    } else {
      if (ch === "\n") screen.newline();
      else if (ch === "\r") {
        if (text[i + 1] !== "\n") screen.cr(); // \r\n is one newline
      } else if (ch === "\b") screen.back(1);
      else if (!CONTROL.test(ch)) screen.put(ch, style);
      i += 1;
    }
  }
  for (const [cellStyle, chunk] of screen.runs()) append(out, [span(cellStyle || state0, chunk)]);
  out.redrawn = screen.overwrote;
  return out;
}

const state0 = { fg: null, bg: null, bold: false, italic: false, underline: false, fgRgb: null, bgRgb: null };
