// A terminal's text, as far as cursor movement goes: output written through carriage return,
// backspace, cursor up/down/forward/back, column and erase-in-line lands where a terminal
// would put it (a readline echo redrawn with \x1b[A\x1b[C... reads as the command once, not
// as noise). Each cell keeps the style it was written with. ``overwrote`` says that written
// text was later replaced or erased, so the view can flag it and offer the raw output.
export class Screen {
  constructor() {
    this.lines = [[]];
    this.row = 0;
    this.col = 0;
    this.overwrote = false;
  }

  line() {
    while (this.lines.length <= this.row) this.lines.push([]);
    return this.lines[this.row];
  }

  put(ch, style) {
    const line = this.line();
    while (line.length < this.col) line.push({ ch: " ", style: null });
    const old = line[this.col];
    if (old && old.ch !== " " && old.ch !== ch) this.overwrote = true;
    line[this.col] = { ch, style };
    this.col += 1;
  }

  newline() { this.row += 1; this.col = 0; this.line(); }
  cr() { this.col = 0; }
  back(n) { this.col = Math.max(0, this.col - n); }
  forward(n) { this.col += n; }
  up(n) { this.row = Math.max(0, this.row - n); }
  down(n) { this.row += n; this.line(); }
  column(n) { this.col = Math.max(0, n - 1); }

  // Erase in line: 0 from the cursor to the end, 1 from the start to the cursor, 2 all.
  erase(mode) {
    const line = this.line();
    const [from, to] = mode === 1 ? [0, this.col + 1] : mode === 2 ? [0, line.length] : [this.col, line.length];
    if (line.slice(from, to).some((c) => c.ch !== " ")) this.overwrote = true;
    if (mode === 1) for (let i = 0; i < Math.min(to, line.length); i++) line[i] = { ch: " ", style: null };
    else line.length = Math.min(line.length, from);
  }

  // Runs of text with one style each, lines joined by newlines: [[style, text], ...].
  runs() {
    const out = [];
    this.lines.forEach((line, i) => {
      if (i > 0) out.push([null, "\n"]);
      for (const cell of line) {
        const last = out[out.length - 1];
        if (last && last[0] === cell.style) last[1] += cell.ch;
        else out.push([cell.style, cell.ch]);
      }
    });
    return out;
  }
}
