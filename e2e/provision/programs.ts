// Which external programs the project's code and scripts run, and whether each is provisioned: on the machine list
// (scripts/packages.txt, installed by scripts/bootstrap), built by the testbed (a TESTBED_* path in testbed.env), or
// installed by npm ci (node_modules/.bin). TypeScript is read with the compiler's parser, shell with shfmt's
// (mvdan.cc/sh, built by the testbed): a program is found by the syntax that runs it, never by a text search. What
// this cannot tell (a program computed at run time) is reported as such, so the check fails rather than miss it;
// a shell command named by a variable ("$JAVA") is not seen.
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { basename, dirname, join, relative, resolve } from "node:path";
import ts from "typescript";
import { need } from "../support/testbed.ts";

/** One program a file runs, where it runs it, and what provides it (undefined: nothing does). */
export interface Use {
  readonly file: string;
  readonly line: number;
  readonly program: string;
  readonly provider: string | undefined;
}

/** scripts/packages.txt as program -> Debian package ("-": one of the machine's own toolchains). */
export function readPackageList(file: string): Map<string, string> {
  const list = new Map<string, string>();
  for (const [i, raw] of readFileSync(file, "utf8").split("\n").entries()) {
    const line = raw.replace(/#.*/, "").trim();
    if (line === "") continue;
    const m = /^([a-z0-9][a-z0-9+.-]*|-):((?:\s+[A-Za-z0-9_.+-]+)+)$/.exec(line);
    if (!m?.[1] || !m[2])
      throw new Error(`${file}:${i + 1}: expected "PACKAGE: PROGRAM..." (or "-: PROGRAM..."), got "${raw}"`);
    for (const program of m[2].trim().split(/\s+/)) {
      if (list.has(program)) throw new Error(`${file}:${i + 1}: ${program} is listed twice`);
      list.set(program, m[1]);
    }
  }
  return list;
}

const SKIP_DIRS = new Set(["node_modules", "dist", ".git", "archive"]);
// Not read: the bootstrap installs the list (it runs only npm, node and apt-get, the last one where it exists).
const SKIP_FILES = new Set(["scripts/bootstrap"]);
const SHEBANG = /^#!\s*(?:\/usr\/bin\/env\s+)?(?:\/bin\/|\/usr\/bin\/)?(?:ba|da)?sh\b/;

/** The repository's TypeScript files and shell scripts (a .sh name or a shell shebang), relative to root. */
function sourceFiles(root: string): { ts: string[]; sh: string[] } {
  const out = { ts: [] as string[], sh: [] as string[] };
  const walk = (dir: string) => {
    for (const e of readdirSync(join(root, dir), { withFileTypes: true })) {
      const rel = join(dir, e.name);
      if (SKIP_FILES.has(rel)) continue;
      if (e.isDirectory()) {
        if (!SKIP_DIRS.has(e.name)) walk(rel);
      } else if (e.isFile()) {
        if (/\.[cm]?ts$/.test(e.name) && !e.name.endsWith(".d.ts")) out.ts.push(rel);
        else if (e.name.endsWith(".sh") || SHEBANG.test(readFileSync(join(root, rel), "utf8").slice(0, 64))) {
          out.sh.push(rel);
        }
      }
    }
  };
  walk(".");
  out.ts.sort();
  out.sh.sort();
  return out;
}

// --- shell ---

// Builtins and keywords bash runs itself; `command -v X` only asks for X, so it names no program it runs.
const BUILTINS = new Set(
  (
    ". : [ alias bg break builtin caller cd command compgen complete continue declare dirs disown echo enable eval exec " +
    "exit export false fc fg getopts hash help history jobs kill let local logout mapfile popd printf pushd pwd read " +
    "readarray readonly return set shift shopt source suspend test times trap true type typeset ulimit umask unalias " +
    "unset wait"
  ).split(" "),
);
// Programs that run the program named by their first operand.
const WRAPPERS = new Set(["exec", "command", "setsid", "nohup", "env", "timeout", "xargs"]);

interface ShNode {
  readonly Type?: string;
  readonly Pos?: { Line: number };
  readonly Args?: readonly { Parts?: readonly ShNode[] }[];
  readonly Name?: { Value: string };
  readonly Value?: string;
  readonly Parts?: readonly ShNode[];
}

/** A word made only of literal text (plain or quoted), as its text; undefined when it expands anything. */
function literalWord(word: { Parts?: readonly ShNode[] } | undefined): string | undefined {
  let text = "";
  for (const part of word?.Parts ?? []) {
    if ((part.Type === "Lit" || part.Type === "SglQuoted") && part.Value !== undefined) text += part.Value;
    else if (part.Type === "DblQuoted") {
      const inner = literalWord(part);
      if (inner === undefined) return undefined;
      text += inner;
    } else return undefined;
  }
  return word?.Parts?.length ? text : undefined;
}

/** Parses a shell script with the testbed's shfmt; a script shfmt cannot parse is an error naming the file. */
function parseShell(script: string, where: string): ShNode {
  const r = spawnSync(need("TESTBED_SHFMT"), ["--to-json", "-ln", "bash"], {
    input: script,
    encoding: "utf8",
    maxBuffer: 64 << 20,
  });
  if (r.error) throw r.error;
  if (r.status !== 0) throw new Error(`shfmt could not parse ${where}: ${r.stderr.trim()}`);
  return JSON.parse(r.stdout) as ShNode;
}

function walkShell(node: unknown, visit: (n: ShNode) => void): void {
  if (Array.isArray(node)) for (const n of node) walkShell(n, visit);
  else if (node !== null && typeof node === "object") {
    visit(node as ShNode);
    for (const v of Object.values(node)) walkShell(v, visit);
  }
}

/** The functions a script declares (its own commands, not programs). */
function shellFunctions(tree: ShNode): string[] {
  const names: string[] = [];
  walkShell(tree, (n) => n.Type === "FuncDecl" && n.Name && names.push(n.Name.Value));
  return names;
}

/** Every literal command name of a parsed script with its line; a command named by an expansion is not seen. */
function shellCommands(tree: ShNode, line0: number): { program: string; line: number }[] {
  const found: { program: string; line: number }[] = [];
  walkShell(tree, (n) => {
    if (n.Type !== "CallExpr" || !n.Args?.length) return;
    const words = n.Args.map(literalWord);
    const line = line0 + (n.Pos?.Line ?? 1) - 1;
    for (let i = 0; i < words.length; i++) {
      const word = words[i];
      if (word === undefined) return;
      if (word === "command" && words[i + 1] === "-v") return;
      if (!BUILTINS.has(word)) found.push({ program: word, line });
      if (!WRAPPERS.has(word)) return;
      // The wrapped program: the first operand that is not an option, an assignment (env) or a duration (timeout).
      while (i + 1 < words.length && /^-|=|^\d/.test(words[i + 1] ?? "")) i++;
    }
  });
  return found;
}

// --- TypeScript ---

const CHILD_PROCESS = new Set(["node:child_process", "child_process"]);
const SPAWNERS = new Set(["spawn", "spawnSync", "execFile", "execFileSync"]);
const SHELL_RUNNERS = new Set(["exec", "execSync"]);

/** What a spawn's program expression comes to: a name or path, a testbed variable, or something this cannot tell. */
type Origin = { program: string } | { testbed: string } | { unknown: string };

class TsFiles {
  readonly #files = new Map<string, ts.SourceFile>();
  readonly root: string;
  constructor(root: string) {
    this.root = root;
  }

  get(file: string): ts.SourceFile {
    let sf = this.#files.get(file);
    if (!sf) {
      sf = ts.createSourceFile(file, readFileSync(join(this.root, file), "utf8"), ts.ScriptTarget.Latest, true);
      this.#files.set(file, sf);
    }
    return sf;
  }
}

/** Follows an expression through constants, imports, parameters, tables and conditionals to the nodes it can be. */
class Resolver {
  private readonly files: TsFiles;
  private readonly seen = new Set<ts.Node>();
  constructor(files: TsFiles) {
    this.files = files;
  }

  values(expr: ts.Expression, file: string): { node: ts.Expression; file: string }[] {
    if (this.seen.has(expr)) return [];
    this.seen.add(expr);
    if (
      ts.isParenthesizedExpression(expr) ||
      ts.isAsExpression(expr) ||
      ts.isNonNullExpression(expr) ||
      ts.isSatisfiesExpression(expr)
    ) {
      return this.values(expr.expression, file);
    }
    if (ts.isConditionalExpression(expr)) {
      return [...this.values(expr.whenTrue, file), ...this.values(expr.whenFalse, file)];
    }
    if (ts.isBinaryExpression(expr) && expr.operatorToken.kind === ts.SyntaxKind.QuestionQuestionToken) {
      return [...this.values(expr.left, file), ...this.values(expr.right, file)];
    }
    if (ts.isIdentifier(expr)) return expr.text === "undefined" ? [] : this.identifier(expr, expr.text, file);
    if (
      ts.isPropertyAccessExpression(expr) &&
      !(ts.isIdentifier(expr.expression) && expr.expression.text === "process")
    ) {
      return this.values(expr.expression, file).flatMap((o) => this.member(o, expr.name.text));
    }
    if (ts.isElementAccessExpression(expr)) {
      const key = expr.argumentExpression;
      const name = ts.isStringLiteralLike(key) || ts.isNumericLiteral(key) ? key.text : undefined;
      return this.values(expr.expression, file).flatMap((o) => this.member(o, name));
    }
    // A call of a function of the file: what it returns. need() stays a call: origin() reads its testbed variable.
    if (ts.isCallExpression(expr) && ts.isIdentifier(expr.expression) && expr.expression.text !== "need") {
      const returned = this.returns(expr.expression.text, file);
      if (returned.length) return returned.flatMap((e) => this.values(e, file));
    }
    return [{ node: expr, file }];
  }

  /** What a function declared in the file returns (its return statements, not those of functions inside it). */
  private returns(name: string, file: string): ts.Expression[] {
    const out: ts.Expression[] = [];
    const collect = (n: ts.Node): void => {
      if (ts.isReturnStatement(n) && n.expression) out.push(n.expression);
      else if (!ts.isFunctionLike(n)) ts.forEachChild(n, collect);
    };
    const visit = (n: ts.Node): void => {
      if (ts.isFunctionDeclaration(n) && n.name?.text === name && n.body) ts.forEachChild(n.body, collect);
      else ts.forEachChild(n, visit);
    };
    visit(this.files.get(file));
    return out;
  }

  /** A property (or, with no name, every property) of an object or array literal. */
  private member(o: { node: ts.Expression; file: string }, name: string | undefined) {
    const { node, file } = o;
    if (ts.isObjectLiteralExpression(node)) {
      return node.properties.flatMap((p) => {
        const named = name === undefined || p.name?.getText() === name || p.name?.getText() === `"${name}"`;
        if (named && ts.isPropertyAssignment(p)) return this.values(p.initializer, file);
        if (named && ts.isShorthandPropertyAssignment(p)) return this.identifier(p.name, p.name.text, file);
        return [];
      });
    }
    if (ts.isArrayLiteralExpression(node)) {
      const elements = name === undefined ? node.elements : node.elements.filter((_, i) => String(i) === name);
      return elements.flatMap((e) => this.values(e, file));
    }
    return [o];
  }

  /** The declarations of `name` in `file` (an import: the exported one of its module); `at`, when it stands there. */
  private identifier(at: ts.Expression, name: string, file: string): { node: ts.Expression; file: string }[] {
    const found: { node: ts.Expression; file: string }[] = [];
    const visit = (n: ts.Node): void => {
      if (ts.isVariableDeclaration(n) && ts.isIdentifier(n.name) && n.name.text === name && n.initializer) {
        found.push(...this.values(n.initializer, file));
      } else if (ts.isParameter(n) && ts.isIdentifier(n.name) && n.name.text === name && isWithin(at, n.parent)) {
        found.push(...this.parameter(n, file));
      } else if (ts.isImportSpecifier(n) && n.name.text === name) {
        const from = (n.parent.parent.parent.moduleSpecifier as ts.StringLiteral).text;
        if (from.startsWith(".")) {
          const target = relative(this.files.root, resolve(this.files.root, dirname(file), from));
          found.push(...this.identifier(at, (n.propertyName ?? n.name).text, target));
        }
      }
      ts.forEachChild(n, visit);
    };
    visit(this.files.get(file));
    return found.length ? found : [{ node: at, file }];
  }

  /** A parameter: its string literal type's members, else the matching argument of each call in the same file. */
  private parameter(p: ts.ParameterDeclaration, file: string): { node: ts.Expression; file: string }[] {
    const literals = literalTypes(p.type);
    if (literals.length) return literals.map((text) => ({ node: ts.factory.createStringLiteral(text), file }));
    const fn = p.parent;
    const name =
      ts.isFunctionDeclaration(fn) && fn.name
        ? fn.name.text
        : ts.isVariableDeclaration(fn.parent) && ts.isIdentifier(fn.parent.name)
          ? fn.parent.name.text
          : undefined;
    const index = fn.parameters.indexOf(p);
    const out: { node: ts.Expression; file: string }[] = [];
    const visit = (n: ts.Node): void => {
      if (ts.isCallExpression(n) && ts.isIdentifier(n.expression) && n.expression.text === name) {
        const arg = n.arguments[index];
        if (arg) out.push(...this.values(arg, file));
      }
      ts.forEachChild(n, visit);
    };
    if (name !== undefined) visit(this.files.get(file));
    return out;
  }
}

function isWithin(node: ts.Node, container: ts.Node): boolean {
  for (let n: ts.Node | undefined = node; n; n = n.parent) if (n === container) return true;
  return false;
}

function literalTypes(type: ts.TypeNode | undefined): string[] {
  if (type === undefined) return [];
  if (ts.isLiteralTypeNode(type) && ts.isStringLiteral(type.literal)) return [type.literal.text];
  if (ts.isUnionTypeNode(type)) {
    const parts = type.types.map(literalTypes);
    return parts.every((p) => p.length) ? parts.flat() : [];
  }
  return [];
}

/** What one resolved node is as a program. */
function origin(r: Resolver, node: ts.Expression, file: string): Origin[] {
  if (ts.isStringLiteralLike(node)) return [{ program: node.text }];
  if (ts.isPropertyAccessExpression(node) && node.getText() === "process.execPath") {
    return [{ program: "node_modules/.bin/node" }];
  }
  if (ts.isCallExpression(node) && ts.isIdentifier(node.expression)) {
    const [first] = node.arguments;
    // need("TESTBED_X"): a path the testbed wrote into testbed.env.
    if (node.expression.text === "need" && first) {
      return r
        .values(first, file)
        .map((v) => (ts.isStringLiteralLike(v.node) ? { testbed: v.node.text } : unknown(v.node)));
    }
    // join(repo, "node_modules/.bin/node") and the like: the literal last segment names the program.
    const last = node.arguments.at(-1);
    if (
      (node.expression.text === "join" || node.expression.text === "resolve") &&
      last &&
      ts.isStringLiteralLike(last)
    ) {
      return [{ program: last.text }];
    }
  }
  return [unknown(node)];
}

function unknown(node: ts.Node): Origin {
  return { unknown: node.getText().replace(/\s+/g, " ").slice(0, 80) };
}

/**
 * The text of a shell script handed to `sh -c`, as lines: each literal piece it can be (both sides of a condition,
 * the items of a joined array), an interpolation standing as one word. Undefined when a piece is not literal.
 */
function scriptText(r: Resolver, expr: ts.Expression, file: string): string | undefined {
  const pieces: string[] = [];
  for (const { node, file: at } of r.values(expr, file)) {
    let text: string | undefined;
    if (ts.isStringLiteralLike(node)) text = node.text;
    else if (ts.isTemplateExpression(node)) {
      text = node.head.text + node.templateSpans.map((s) => `"$x"${s.literal.text}`).join("");
    } else if (ts.isArrayLiteralExpression(node)) {
      const items = node.elements.map((e) => scriptText(r, ts.isSpreadElement(e) ? e.expression : e, at));
      text = items.every((t) => t !== undefined) ? items.join("\n") : undefined;
    } else if (ts.isCallExpression(node) && ts.isPropertyAccessExpression(node.expression)) {
      const method = node.expression.name.text;
      const [fn] = node.arguments;
      if (method === "join") text = scriptText(r, node.expression.expression, at);
      // lines.flatMap((m) => [...]): the lines the callback returns, for any item.
      else if ((method === "map" || method === "flatMap") && fn && ts.isArrowFunction(fn)) {
        const body = fn.body;
        const returned = ts.isBlock(body)
          ? body.statements.flatMap((st) => (ts.isReturnStatement(st) && st.expression ? [st.expression] : []))
          : [body];
        const items = returned.map((e) => scriptText(r, e, at));
        text = items.length && items.every((t) => t !== undefined) ? items.join("\n") : undefined;
      }
    }
    if (text === undefined) return undefined;
    pieces.push(text);
  }
  return pieces.join("\n");
}

interface Spawn {
  readonly line: number;
  readonly origins: Origin[];
  readonly scripts: { text: string | undefined; line: number }[];
}

/** Each child_process call of a file: what program it runs, and the scripts it hands to a shell. */
function tsSpawns(files: TsFiles, file: string): Spawn[] {
  const sf = files.get(file);
  const local = new Map<string, string>();
  for (const st of sf.statements) {
    if (!ts.isImportDeclaration(st) || !CHILD_PROCESS.has((st.moduleSpecifier as ts.StringLiteral).text)) continue;
    const named = st.importClause?.namedBindings;
    if (named && ts.isNamedImports(named)) {
      for (const el of named.elements) local.set(el.name.text, (el.propertyName ?? el.name).text);
    }
  }
  const spawns: Spawn[] = [];
  const visit = (n: ts.Node): void => {
    if (ts.isCallExpression(n) && ts.isIdentifier(n.expression) && local.has(n.expression.text)) {
      const kind = local.get(n.expression.text) ?? "";
      const [program, args] = n.arguments;
      const line = sf.getLineAndCharacterOfPosition(n.getStart()).line + 1;
      const r = new Resolver(files);
      if (program && SPAWNERS.has(kind)) {
        spawns.push({
          line,
          origins: r.values(program, file).flatMap((v) => origin(r, v.node, v.file)),
          scripts: shellArgs(r, program, args, file, line),
        });
      } else if (program && SHELL_RUNNERS.has(kind)) {
        spawns.push({ line, origins: [], scripts: [{ text: scriptText(r, program, file), line }] });
      }
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return spawns;
}

/** The script after `sh -c` (or bash), the shell being the program or in its arguments (unshare ... sh -c). */
function shellArgs(r: Resolver, program: ts.Expression, args: ts.Expression | undefined, file: string, line: number) {
  if (!args || !ts.isArrayLiteralExpression(args)) return [];
  const literal = (e: ts.Expression | undefined) => (e && ts.isStringLiteralLike(e) ? e.text : undefined);
  const out: { text: string | undefined; line: number }[] = [];
  args.elements.forEach((e, i) => {
    const shell = literal(i === 0 ? program : args.elements[i - 1]);
    const script = args.elements[i + 1];
    if (literal(e) === "-c" && (shell === "sh" || shell === "bash") && script) {
      out.push({ text: scriptText(r, script, file), line });
    }
  });
  return out;
}

// --- the check ---

/**
 * Every program run by the TypeScript files and shell scripts under root, each with what provides it. Fails (throws)
 * only on a script shfmt cannot parse; a program nothing provides, or one that cannot be told, comes back unprovided.
 */
export function programUses(root: string, list: Map<string, string>): Use[] {
  const { ts: tsFiles, sh: shFiles } = sourceFiles(root);
  const trees = shFiles.map((file) => ({ file, tree: parseShell(readFileSync(join(root, file), "utf8"), file) }));
  const testbedVars = testbedVariables(trees);
  const functions = new Set(trees.flatMap((t) => shellFunctions(t.tree)));

  const provider = (program: string): string | undefined => {
    if (/(^|\/)node_modules\/\.bin\/[^/]+$/.test(program)) {
      return existsSync(join(root, "node_modules", ".bin", basename(program))) ? "npm ci" : undefined;
    }
    // A script of the repository run by its path (e2e/testbed/up) is checked as a script itself.
    if (program.includes("/") && !program.startsWith("/")) {
      return existsSync(join(root, program)) ? "the repository" : undefined;
    }
    const pkg = list.get(basename(program));
    if (pkg === undefined) return functions.has(program) ? "a shell function" : undefined;
    return pkg === "-" ? "the machine" : `Debian ${pkg}`;
  };

  const uses: Use[] = [];
  for (const { file, tree } of trees) {
    for (const c of shellCommands(tree, 1))
      uses.push({ file, line: c.line, program: c.program, provider: provider(c.program) });
  }
  const files = new TsFiles(root);
  for (const file of tsFiles) {
    for (const s of tsSpawns(files, file)) {
      for (const o of s.origins) {
        if ("testbed" in o) {
          const ok = testbedVars.has(o.testbed);
          uses.push({ file, line: s.line, program: o.testbed, provider: ok ? "the testbed" : undefined });
        } else if ("program" in o) {
          uses.push({ file, line: s.line, program: o.program, provider: provider(o.program) });
        } else {
          uses.push({ file, line: s.line, program: `(cannot tell: ${o.unknown})`, provider: undefined });
        }
      }
      for (const sc of s.scripts) {
        if (sc.text === undefined) {
          uses.push({ file, line: sc.line, program: "(a shell script this cannot read)", provider: undefined });
          continue;
        }
        for (const c of shellCommands(parseShell(sc.text, `${file}:${sc.line}`), sc.line)) {
          uses.push({ file, line: sc.line, program: c.program, provider: provider(c.program) });
        }
      }
    }
  }
  return uses;
}

/** The TESTBED_* variables the scripts write into testbed.env: each `tb_env SVC NAME VALUE` (e2e/testbed/lib.sh). */
function testbedVariables(trees: readonly { tree: ShNode }[]): Set<string> {
  const vars = new Set<string>();
  for (const { tree } of trees) {
    walkShell(tree, (n) => {
      const [cmd, , name] = n.Type === "CallExpr" ? (n.Args ?? []).map(literalWord) : [];
      if (cmd === "tb_env" && name?.startsWith("TESTBED_")) vars.add(name);
    });
  }
  return vars;
}
