// path_template: the seed's whole set of tokens. Anything else in braces is refused at config time, so literal
// braces never reach an object key.

export const PATH_TOKENS = ["year", "month", "day", "hour", "minute", "timestamp", "seq"] as const;
export type PathToken = (typeof PATH_TOKENS)[number];

export type TemplatePart = { literal: string } | { token: PathToken };

/** Splits a template into literals and tokens; returns the offending token text when one is unknown or unclosed. */
export function parsePathTemplate(template: string): { parts: TemplatePart[] } | { error: string } {
  const parts: TemplatePart[] = [];
  let i = 0;
  while (i < template.length) {
    const open = template.indexOf("{", i);
    const close = template.indexOf("}", i);
    if (close !== -1 && (open === -1 || close < open)) return { error: template.slice(i, close + 1) };
    if (open === -1) {
      parts.push({ literal: template.slice(i) });
      break;
    }
    if (open > i) parts.push({ literal: template.slice(i, open) });
    const end = template.indexOf("}", open);
    if (end === -1) return { error: template.slice(open) };
    const name = template.slice(open + 1, end);
    if (!(PATH_TOKENS as readonly string[]).includes(name)) return { error: `{${name}}` };
    parts.push({ token: name as PathToken });
    i = end + 1;
  }
  return { parts };
}

const pad = (n: number, width = 2) => String(n).padStart(width, "0");

/** Expands a parsed template at `at` (UTC) for the rolled-file sequence number `seq`. */
export function expandPathTemplate(parts: readonly TemplatePart[], at: Date, seq: number): string {
  let out = "";
  for (const p of parts) {
    if ("literal" in p) {
      out += p.literal;
      continue;
    }
    switch (p.token) {
      case "year":
        out += pad(at.getUTCFullYear(), 4);
        break;
      case "month":
        out += pad(at.getUTCMonth() + 1);
        break;
      case "day":
        out += pad(at.getUTCDate());
        break;
      case "hour":
        out += pad(at.getUTCHours());
        break;
      case "minute":
        out += pad(at.getUTCMinutes());
        break;
      case "timestamp":
        out += String(Math.floor(at.getTime() / 1000));
        break;
      case "seq":
        out += pad(seq, 6);
        break;
    }
  }
  return out;
}
