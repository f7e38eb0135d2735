#!/usr/bin/env node
// The entry point of dfe-archiver-operator: refuses a Node older than 24 in one line (node-check.ts), then loads and
// runs the CLI (cli.ts). Nothing else is imported statically: the modules behind cli.ts use Node 24's APIs as they
// load, and an older Node would die there, before the check, with an error that does not say why.
import { refuseUnsupportedNode } from "../../runtime/src/node-check.ts";

refuseUnsupportedNode("dfe-archiver-operator");
const { main } = await import("./cli.ts");
main(process.argv.slice(2));
