// The import graph of a source tree, read with the TypeScript parser (never a text search): every relative
// `import`, `export ... from`, `import("...")` and `import("...").Type` of each .ts file, type-only ones included (a
// circle of types is still a circle a reader has to hold in mind at once).
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import ts from "typescript";

/** Each file (relative to the root, with `/`) and the files under the root it imports. */
export type ImportGraph = ReadonlyMap<string, readonly string[]>;

/** The import graph of every .ts file under `root`; an import that leaves the root is not an edge. */
export function importGraph(root: string): ImportGraph {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const e of readdirSync(join(root, dir), { withFileTypes: true })) {
      const rel = dir === "" ? e.name : `${dir}/${e.name}`;
      if (e.isDirectory()) walk(rel);
      else if (e.isFile() && e.name.endsWith(".ts") && !e.name.endsWith(".d.ts")) files.push(rel);
    }
  };
  walk("");
  files.sort();
  const known = new Set(files);
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const source = ts.createSourceFile(file, readFileSync(join(root, file), "utf8"), ts.ScriptTarget.Latest, false);
    const to = new Set<string>();
    const add = (specifier: string) => {
      if (!specifier.startsWith(".")) return;
      const target = relative(root, resolve(root, dirname(file), specifier))
        .split("\\")
        .join("/");
      if (known.has(target)) to.add(target);
    };
    const visit = (n: ts.Node) => {
      if ((ts.isImportDeclaration(n) || ts.isExportDeclaration(n)) && n.moduleSpecifier) {
        if (ts.isStringLiteral(n.moduleSpecifier)) add(n.moduleSpecifier.text);
      } else if (ts.isCallExpression(n) && n.expression.kind === ts.SyntaxKind.ImportKeyword) {
        const arg = n.arguments[0];
        if (arg && ts.isStringLiteralLike(arg)) add(arg.text);
      } else if (ts.isImportTypeNode(n) && ts.isLiteralTypeNode(n.argument) && ts.isStringLiteral(n.argument.literal)) {
        add(n.argument.literal.text);
      }
      ts.forEachChild(n, visit);
    };
    visit(source);
    graph.set(file, [...to].sort());
  }
  return graph;
}

/**
 * One circle through each set of files that import each other round (a strongly connected component of the graph),
 * as the files in import order with the first repeated at the end; none when the imports run one way.
 */
export function importCycles(graph: ImportGraph): string[][] {
  // Tarjan's algorithm, iterative so a deep tree cannot overflow the stack.
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const components: string[][] = [];
  for (const start of graph.keys()) {
    if (index.has(start)) continue;
    const work: { file: string; next: number }[] = [{ file: start, next: 0 }];
    index.set(start, index.size);
    low.set(start, index.get(start)!);
    stack.push(start);
    onStack.add(start);
    while (work.length > 0) {
      const top = work[work.length - 1]!;
      const targets = graph.get(top.file) ?? [];
      if (top.next < targets.length) {
        const to = targets[top.next++]!;
        if (!index.has(to)) {
          index.set(to, index.size);
          low.set(to, index.get(to)!);
          stack.push(to);
          onStack.add(to);
          work.push({ file: to, next: 0 });
        } else if (onStack.has(to)) {
          low.set(top.file, Math.min(low.get(top.file)!, index.get(to)!));
        }
        continue;
      }
      work.pop();
      const parent = work[work.length - 1];
      if (parent) low.set(parent.file, Math.min(low.get(parent.file)!, low.get(top.file)!));
      if (low.get(top.file) !== index.get(top.file)) continue;
      const component: string[] = [];
      for (let f = stack.pop()!; ; f = stack.pop()!) {
        onStack.delete(f);
        component.push(f);
        if (f === top.file) break;
      }
      if (component.length > 1 || graph.get(top.file)?.includes(top.file)) components.push(component);
    }
  }
  return components.map((c) => circleIn(graph, new Set(c))).sort((a, b) => a[0]!.localeCompare(b[0]!));
}

/** A shortest circle from the component's first file (by name) back to it, through the component's files only. */
function circleIn(graph: ImportGraph, component: ReadonlySet<string>): string[] {
  const first = [...component].sort()[0]!;
  const cameFrom = new Map<string, string>();
  const queue = [first];
  for (let i = 0; i < queue.length; i++) {
    const file = queue[i]!;
    for (const to of graph.get(file) ?? []) {
      if (!component.has(to)) continue;
      if (to === first) {
        const path = [first];
        for (let f: string | undefined = file; f !== undefined && f !== first; f = cameFrom.get(f)) path.unshift(f);
        return [first, ...path];
      }
      if (!cameFrom.has(to)) {
        cameFrom.set(to, file);
        queue.push(to);
      }
    }
  }
  throw new Error(`${first} is in an import circle, yet no circle leads back to it`);
}

/** Each import from a file under `from/` of a file under `to/`, as "importer -> imported". */
export function importsAcross(graph: ImportGraph, from: string, to: string): string[] {
  const found: string[] = [];
  for (const [file, targets] of graph) {
    if (!file.startsWith(`${from}/`)) continue;
    for (const target of targets) if (target.startsWith(`${to}/`)) found.push(`${file} -> ${target}`);
  }
  return found;
}
