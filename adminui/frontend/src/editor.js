// The admin's code editor: CodeMirror 6 over the plain textareas of the version form.
//
// Progressive enhancement: each `textarea[data-editor]` stays in the form and is what gets
// posted; the editor shows it with line numbers, bracket matching and (for "json") syntax
// highlighting, and writes every change back into it. Without JavaScript the page is the
// plain form it always was. Errors that the server reports next to a field with a line and
// column ("at line 3, column 5") or a JSON path ("tools[0].input_schema.type: ...") become
// buttons that jump to that place, and their lines are marked in the editor.
//
// Built into adminui/static/adminui/editor.js by `make ui-assets` (esbuild, one file).

import { EditorView, basicSetup } from "codemirror";
import { json, jsonLanguage } from "@codemirror/lang-json";
import { HighlightStyle, ensureSyntaxTree, syntaxHighlighting } from "@codemirror/language";
import { tags } from "@lezer/highlight";
import { EditorSelection, StateEffect, StateField, RangeSet } from "@codemirror/state";
import { Decoration, GutterMarker, gutter } from "@codemirror/view";

// --- error lines -----------------------------------------------------------------------------

const setErrorLines = StateEffect.define();

const errorLineDeco = Decoration.line({ class: "adminui-error-line" });

class ErrorMarker extends GutterMarker {
  toDOM() {
    const mark = document.createElement("span");
    mark.className = "adminui-error-marker";
    mark.textContent = "●";
    mark.title = "An error is reported on this line";
    return mark;
  }
}
const errorMarker = new ErrorMarker();

// Positions (line starts) of the lines that carry an error; kept across edits.
const errorLines = StateField.define({
  create: () => Decoration.none,
  update(value, tr) {
    value = value.map(tr.changes);
    for (const effect of tr.effects) {
      if (effect.is(setErrorLines)) {
        const starts = [...new Set(effect.value)].sort((a, b) => a - b);
        value = Decoration.set(starts.map((pos) => errorLineDeco.range(pos)));
      }
    }
    return value;
  },
  provide: (field) => EditorView.decorations.from(field),
});

const errorGutter = gutter({
  class: "adminui-error-gutter",
  markers: (view) => {
    const lines = view.state.field(errorLines);
    const markers = [];
    lines.between(0, view.state.doc.length, (from) => {
      markers.push(errorMarker.range(from));
    });
    return RangeSet.of(markers, true);
  },
});

// --- where an error points -------------------------------------------------------------------

const LINE_COLUMN = /line (\d+),? column (\d+)/i;


// Completion in the JSON boxes: inside a string, the JSON Schema keywords and type names (tools'
// input_schema, output_schema) and the guardrails' keys and effects, as the field takes them.
const SCHEMA_WORDS = [
  "type", "properties", "required", "items", "enum", "const", "description", "title", "default",
  "minimum", "maximum", "minLength", "maxLength", "pattern", "format", "additionalProperties",
  "anyOf", "oneOf", "allOf", "minItems", "maxItems", "$defs", "$ref",
  "string", "number", "integer", "boolean", "array", "object", "null",
];
const FIELD_WORDS = {
  tools: ["name", "description", "input_schema", ...SCHEMA_WORDS],
  output_schema: SCHEMA_WORDS,
  guardrails: ["default", "rules", "tool", "effect", "reason", "allow", "confirm", "deny"],
};

function fieldCompletion(fieldName) {
  const words = FIELD_WORDS[fieldName];
  if (!words) return [];
  const options = words.map((label) => ({ label, type: "keyword" }));
  return jsonLanguage.data.of({
    autocomplete: (context) => {
      const word = context.matchBefore(/"[\w$]*/);
      if (!word || (word.from === word.to && !context.explicit)) return null;
      return { from: word.from + 1, options, validFor: /^[\w$]*$/ };
    },
  });
}

function positionOfLineColumn(state, line, column) {
  const lines = state.doc.lines;
  const at = state.doc.line(Math.min(Math.max(line, 1), lines));
  return Math.min(at.from + Math.max(column - 1, 0), at.to);
}

// "[0].input_schema.properties.amount" -> [0, "input_schema", "properties", "amount"]
function parsePath(path) {
  const parts = [];
  const re = /\[(\d+)\]|\.?([A-Za-z0-9_$\-]+)/g;
  let m;
  while ((m = re.exec(path)) !== null) {
    if (m[1] !== undefined) parts.push(Number(m[1]));
    else parts.push(m[2]);
  }
  return parts;
}

const PUNCTUATION = new Set(["[", "]", "{", "}", ",", ":", "⚠"]);

function valueChildren(node) {
  const out = [];
  for (let child = node.firstChild; child; child = child.nextSibling) {
    if (!PUNCTUATION.has(child.name)) out.push(child);
  }
  return out;
}

// The start of the JSON value at `parts` in the editor's document (or null): walks the
// Lezer JSON syntax tree, so it works on the text exactly as typed.
function positionOfPath(state, parts) {
  const tree = ensureSyntaxTree(state, state.doc.length, 200);
  if (!tree) return null;
  let node = tree.topNode.firstChild;
  while (node && PUNCTUATION.has(node.name)) node = node.nextSibling;
  let best = node ? node.from : null;
  for (const part of parts) {
    if (!node) break;
    let next = null;
    if (typeof part === "number" && node.name === "Array") {
      next = valueChildren(node)[part] || null;
    } else if (typeof part === "string" && node.name === "Object") {
      for (const prop of valueChildren(node)) {
        if (prop.name !== "Property") continue;
        const name = prop.getChild("PropertyName");
        if (!name) continue;
        let key;
        try {
          key = JSON.parse(state.sliceDoc(name.from, name.to));
        } catch (e) {
          continue;
        }
        if (key === part) {
          const kids = valueChildren(prop);
          next = kids[kids.length - 1] !== name ? kids[kids.length - 1] : name;
          break;
        }
      }
    }
    if (!next) break;
    node = next;
    best = node.from;
  }
  return best;
}

function errorPosition(view, fieldName, message, isJson) {
  const lc = LINE_COLUMN.exec(message);
  if (lc) return positionOfLineColumn(view.state, Number(lc[1]), Number(lc[2]));
  if (!isJson) return null;
  // "tools[0].name: ..." (the field's own name, then the path inside it)
  const colon = message.indexOf(": ");
  if (colon <= 0) return null;
  const path = message.slice(0, colon);
  if (!path.startsWith(fieldName)) return null;
  const parts = parsePath(path.slice(fieldName.length));
  if (!parts.length) return null;
  return positionOfPath(view.state, parts);
}

function jumpTo(view, pos) {
  view.dispatch({
    selection: EditorSelection.cursor(pos),
    effects: EditorView.scrollIntoView(pos, { y: "center" }),
  });
  view.focus();
}

// --- one editor per textarea ----------------------------------------------------------------

// JSON colours: keys, strings, numbers and literals each distinct, all at least 4.5:1 on white
// (basicSetup's default style leaves property names uncoloured).
const jsonHighlight = HighlightStyle.define([
  { tag: tags.propertyName, color: "#0b4f8a", fontWeight: "600" },
  { tag: tags.string, color: "#a31515" },
  { tag: tags.number, color: "#116329" },
  { tag: [tags.bool, tags.null], color: "#6f2da8" },
  { tag: tags.invalid, color: "#b71c1c", textDecoration: "underline wavy" },
]);

const theme = EditorView.theme({
  "&": { fontSize: "13px", border: "1px solid var(--border-color, #ccc)", borderRadius: "4px", backgroundColor: "#fff", color: "#1b1b1b" },
  "&.cm-focused": { outline: "2px solid #205067", outlineOffset: "1px" },
  ".cm-scroller": { fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace', lineHeight: "1.45" },
  ".cm-gutters": { backgroundColor: "#f4f4f4", color: "#595959", borderRight: "1px solid #ddd" },
  ".adminui-error-line": { backgroundColor: "#fdecea" },
  ".adminui-error-marker": { color: "#b71c1c", fontSize: "11px", padding: "0 2px" },
});

function enhance(textarea) {
  const kind = textarea.dataset.editor; // "json" or "text"
  const fieldName = textarea.name;
  const rows = Number(textarea.getAttribute("rows")) || 8;
  const label = document.querySelector(`label[for="${textarea.id}"]`);
  if (label && !label.id) label.id = `${textarea.id}_label`;

  const contentAttributes = { "aria-multiline": "true" };
  if (label) contentAttributes["aria-labelledby"] = label.id;
  const describedBy = textarea.getAttribute("aria-describedby");
  if (describedBy) contentAttributes["aria-describedby"] = describedBy;
  if (textarea.getAttribute("aria-invalid")) contentAttributes["aria-invalid"] = "true";

  const host = document.createElement("div");
  host.className = `adminui-editor adminui-editor-${kind}`;
  host.dataset.field = fieldName;
  host.style.setProperty("--adminui-editor-rows", String(rows));
  textarea.insertAdjacentElement("afterend", host);

  const view = new EditorView({
    parent: host,
    doc: textarea.value,
    extensions: [
      basicSetup,
      errorLines,
      errorGutter,
      theme,
      kind === "json" ? [json(), syntaxHighlighting(jsonHighlight), fieldCompletion(fieldName)] : [],
      kind === "json" ? [] : EditorView.lineWrapping,
      EditorView.contentAttributes.of(contentAttributes),
      EditorView.updateListener.of((update) => {
        if (!update.docChanged) return;
        textarea.value = update.state.doc.toString();
        // Tell the page (adminui.js: unsaved edits) that the field changed.
        textarea.dispatchEvent(new Event("input", { bubbles: true }));
      }),
    ],
  });
  textarea.hidden = true;
  textarea.classList.add("adminui-enhanced");
  if (label) label.addEventListener("click", () => view.focus());
  host.adminuiView = view;

  // The errors next to this field: mark their lines, and let each one jump to its place.
  const errors = document.getElementById(`${textarea.id}_error`);
  const starts = [];
  if (errors) {
    for (const item of errors.querySelectorAll("li")) {
      const pos = errorPosition(view, fieldName, item.textContent, kind === "json");
      if (pos === null || pos === undefined) continue;
      const line = view.state.doc.lineAt(pos);
      starts.push(line.from);
      const button = document.createElement("button");
      button.type = "button";
      button.className = "adminui-goto";
      button.textContent = `Go to line ${line.number}`;
      button.dataset.line = String(line.number);
      button.addEventListener("click", () => jumpTo(view, pos));
      item.append(" ", button);
    }
  }
  if (starts.length) view.dispatch({ effects: setErrorLines.of(starts) });
  return view;
}

function enhanceAll() {
  document.querySelectorAll("textarea[data-editor]").forEach((textarea) => {
    try {
      enhance(textarea);
    } catch (err) {
      // The plain textarea still works; say why in the console for whoever debugs it.
      textarea.hidden = false;
      console.error("adminui editor:", err);
    }
  });
  // Links in the error summary that point at an enhanced field go to its editor.
  document.querySelectorAll('#error-summary a[href^="#"]').forEach((link) => {
    const target = document.getElementById(link.getAttribute("href").slice(1));
    const host = target && target.nextElementSibling;
    if (!host || !host.adminuiView) return;
    link.addEventListener("click", (event) => {
      event.preventDefault();
      host.scrollIntoView({ block: "center" });
      host.adminuiView.focus();
    });
  });
}

if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", enhanceAll);
else enhanceAll();
