// adminui cards: the new-version form's tools and skills as cards (a form per tool or skill),
// and "insert example" for the JSON boxes. Progressive enhancement: the cards write the same
// JSON the textarea (or its code editor) holds, which is what is submitted; without this file
// the JSON boxes work as they are. Keys the cards do not show are kept, in the order typed.
(function () {
  "use strict";

  var TYPES = ["string", "number", "integer", "boolean", "array", "object"];
  var EXAMPLES = {
    tools: {
      name: "lookup_order",
      description: "Look up an order by its id.",
      input_schema: {
        type: "object",
        properties: { order_id: { type: "string", description: "The order's id, e.g. A-1042." } },
        required: ["order_id"]
      }
    },
    skills: {
      name: "refund_order",
      summary: "Use when the customer wants money back",
      description: "Refund an order that was paid; not for exchanges.",
      keywords: ["refund", "money back", "return"],
      category: "billing",
      examples: ["I want my money back", "refund my order"],
      level: "L2"
    },
    output_schema: {
      type: "object",
      properties: { answer: { type: "string" } },
      required: ["answer"]
    },
    guardrails: { default: "allow", rules: [{ tool: "lookup_order", effect: "confirm", reason: "Reads customer data." }] }
  };
  // What "Add a tool" / "Add a skill" insert: a blank card with the same keys as the example, for
  // the author to fill in. A filled example added in a hurry got published as it was (issue 35);
  // the examples stay behind "Insert example".
  var BLANKS = {
    tools: { name: "", description: "", input_schema: { type: "object", properties: {} } },
    skills: { name: "", summary: "", description: "", keywords: [], category: "", examples: [], level: "L2" }
  };

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (key) {
      if (key === "text") node.textContent = attrs[key];
      else node.setAttribute(key, attrs[key]);
    });
    (children || []).forEach(function (child) { node.appendChild(child); });
    return node;
  }

  // The JSON box of a field: its textarea, and the code editor over it when editor.js made one.
  function Box(textarea) {
    this.textarea = textarea;
    this.writing = false;
  }
  Box.prototype.view = function () {
    var next = this.textarea.nextElementSibling;
    return next && next.adminuiView ? next.adminuiView : null;
  };
  Box.prototype.text = function () { return this.textarea.value; };
  Box.prototype.write = function (text) {
    var view = this.view();
    this.writing = true;
    try {
      if (view) view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } });
      else {
        this.textarea.value = text;
        this.textarea.dispatchEvent(new Event("input", { bubbles: true }));
      }
    } finally {
      this.writing = false;
    }
  };

  function labelled(text, input) {
    return el("label", { "class": "adminui-card-field" }, [el("span", { text: text }), input]);
  }

  function textInput(value, name, onInput, multiline) {
    var input = el(multiline ? "textarea" : "input", multiline ? { rows: "2" } : { type: "text" });
    input.value = value == null ? "" : String(value);
    input.setAttribute("data-card-field", name);
    input.addEventListener("input", function () { onInput(input.value); });
    return input;
  }

  // --- tools ----------------------------------------------------------------------------
  function schemaOf(tool) {
    if (!tool.input_schema || typeof tool.input_schema !== "object") tool.input_schema = { type: "object" };
    return tool.input_schema;
  }

  // The parameters as rows: [{name, schema, required}], in the order of `properties`.
  function paramRows(tool) {
    var schema = schemaOf(tool);
    var props = schema.properties && typeof schema.properties === "object" ? schema.properties : {};
    var required = Array.isArray(schema.required) ? schema.required : [];
    return Object.keys(props).map(function (name) {
      var prop = props[name] && typeof props[name] === "object" ? props[name] : {};
      return { name: name, schema: prop, required: required.indexOf(name) >= 0 };
    });
  }

  // Rows back into the schema: properties in row order (each keeps its other keys and their
  // order); `required` keeps its order, drops what is gone or unticked, appends what is new.
  function writeParams(tool, rows) {
    var schema = schemaOf(tool);
    var props = {};
    rows.forEach(function (row) { if (row.name) props[row.name] = row.schema; });
    schema.properties = props;
    var before = Array.isArray(schema.required) ? schema.required : [];
    var wanted = rows.filter(function (r) { return r.required && r.name; }).map(function (r) { return r.name; });
    var required = before.filter(function (n) { return wanted.indexOf(n) >= 0; });
    wanted.forEach(function (n) { if (required.indexOf(n) < 0) required.push(n); });
    if (required.length || "required" in schema) schema.required = required;
  }

  function paramRow(tool, rows, row, changed, redraw) {
    var type = el("select", { "data-card-field": "param-type", "aria-label": "Type" });
    var known = TYPES.indexOf(row.schema.type) >= 0 || row.schema.type === undefined;
    TYPES.concat(known ? [] : [String(row.schema.type)]).forEach(function (t) {
      var option = el("option", { value: t, text: t });
      if (t === String(row.schema.type)) option.selected = true;
      type.appendChild(option);
    });
    if (row.schema.type === undefined) type.value = "string";
    type.addEventListener("change", function () { row.schema.type = type.value; changed(); });
    var name = textInput(row.name, "param-name", function (v) { row.name = v; changed(); });
    name.setAttribute("aria-label", "Parameter name");
    var required = el("input", { type: "checkbox", "data-card-field": "param-required", "aria-label": "Required" });
    required.checked = row.required;
    required.addEventListener("change", function () { row.required = required.checked; changed(); });
    var description = textInput(row.schema.description, "param-description", function (v) {
      if (v) row.schema.description = v; else delete row.schema.description;
      changed();
    });
    description.setAttribute("aria-label", "Parameter description");
    var remove = el("button", { type: "button", "class": "button", text: "Remove" });
    remove.addEventListener("click", function () {
      rows.splice(rows.indexOf(row), 1);
      changed();
      redraw();
    });
    return el("tr", {}, [
      el("td", { "data-th": "Parameter" }, [name]),
      el("td", { "data-th": "Type" }, [type]),
      el("td", { "data-th": "Required" }, [required]),
      el("td", { "data-th": "Description" }, [description]),
      el("td", {}, [remove])
    ]);
  }

  function toolCard(tool, index, list, save, redraw) {
    var rows = paramRows(tool);
    function changed() { writeParams(tool, rows); save(); }
    var body = el("tbody");
    function drawRows() {
      body.textContent = "";
      rows.forEach(function (row) { body.appendChild(paramRow(tool, rows, row, changed, drawRows)); });
    }
    drawRows();
    var add = el("button", { type: "button", "class": "button", "data-card-action": "add-param", text: "Add a parameter" });
    add.addEventListener("click", function () {
      rows.push({ name: "param" + (rows.length + 1), schema: { type: "string" }, required: false });
      changed();
      drawRows();
    });
    var remove = el("button", { type: "button", "class": "button", text: "Remove this tool" });
    remove.addEventListener("click", function () { list.splice(index, 1); save(); redraw(); });
    var head = el("tr", {}, ["Parameter", "Type", "Required", "Description", ""].map(function (t) {
      return el("th", { scope: "col", text: t });
    }));
    return el("fieldset", { "class": "adminui-card adminui-tool-card-edit", "data-card": String(index) }, [
      el("legend", { text: "Tool " + (index + 1) }),
      labelled("Name", textInput(tool.name, "name", function (v) { tool.name = v; save(); })),
      labelled("Description", textInput(tool.description, "description", function (v) { tool.description = v; save(); }, true)),
      el("table", { "class": "adminui-params" }, [el("thead", {}, [head]), body]),
      el("p", {}, [add, document.createTextNode(" "), remove])
    ]);
  }

  // --- skills ---------------------------------------------------------------------------
  function listInput(value, name, separator, save, multiline) {
    var text = Array.isArray(value) ? value.join(separator === "\n" ? "\n" : ", ") : "";
    return textInput(text, name, function (v) {
      save(v.split(separator).map(function (s) { return s.trim(); }).filter(Boolean));
    }, multiline);
  }

  // Triggers one a line, as typed: a space at either end is part of a regular expression.
  function triggersInput(value, save) {
    var text = Array.isArray(value) ? value.join("\n") : "";
    return textInput(text, "triggers", function (v) { save(v.split("\n").filter(Boolean)); }, true);
  }

  function skillCard(skill, index, list, save, redraw) {
    var level = el("select", { "data-card-field": "level" });
    ["L1", "L2"].forEach(function (l) {
      var option = el("option", { value: l, text: l === "L1" ? "L1: always loaded" : "L2: routed" });
      if ((skill.level || "L2") === l) option.selected = true;
      level.appendChild(option);
    });
    level.addEventListener("change", function () { skill.level = level.value; save(); });
    var remove = el("button", { type: "button", "class": "button", text: "Remove this skill" });
    remove.addEventListener("click", function () { list.splice(index, 1); save(); redraw(); });
    function set(key) { return function (v) { skill[key] = v; save(); }; }
    // exclusive_group and triggers are optional: emptied, the key goes (an empty group is refused
    // at publish); typed again, it comes back after the keys already there.
    function setOptional(key) {
      return function (v) {
        if (v.length) skill[key] = v; else delete skill[key];
        save();
      };
    }
    return el("fieldset", { "class": "adminui-card adminui-skill-card-edit", "data-card": String(index) }, [
      el("legend", { text: "Skill " + (index + 1) }),
      labelled("Name (snake_case)", textInput(skill.name, "name", set("name"))),
      labelled("Summary (at most 60 characters, “Use when …”)", textInput(skill.summary, "summary", set("summary"))),
      labelled("Description (at most 4,000 characters; an L1 card shows it while resident)",
        textInput(skill.description, "description", set("description"), true)),
      labelled("Keywords (3 to 10, comma-separated)", listInput(skill.keywords, "keywords", ",", set("keywords"))),
      labelled("Category (at most 64 characters; routing picks a category first)",
        textInput(skill.category, "category", set("category"))),
      labelled("Examples (2 to 3, one a line)", listInput(skill.examples, "examples", "\n", set("examples"), true)),
      labelled("Layer", level),
      labelled("Triggers (optional: up to 10 regular expressions RE2 can run, one a line; a match routes the skill)",
        triggersInput(skill.triggers, setOptional("triggers"))),
      labelled("Exclusive group (optional, at most 64 characters: one skill of a group is routed at a time)",
        textInput(skill.exclusive_group, "exclusive_group", setOptional("exclusive_group"))),
      el("p", {}, [remove])
    ]);
  }

  // --- a field's cards ------------------------------------------------------------------
  var CARDS = { tools: toolCard, skills: skillCard };

  function enhance(name, textarea) {
    var box = new Box(textarea);
    var row = document.getElementById("row-" + name);
    var panel = el("div", { "class": "adminui-cards", id: name + "-cards" });
    var note = el("p", { "class": "quiet", role: "status" });
    var add = el("button", { type: "button", "class": "button", "data-card-action": "add", text: name === "tools" ? "Add a tool" : "Add a skill" });
    var list = null;
    function save() { box.write(JSON.stringify(list, null, 2)); }
    function draw() {
      panel.textContent = "";
      var text = box.text();
      try {
        list = text.trim() ? JSON.parse(text) : [];
      } catch (e) {
        list = null;
      }
      if (!Array.isArray(list) || !list.every(function (x) { return x && typeof x === "object" && !Array.isArray(x); })) {
        list = null;
        note.textContent = "The JSON below is not a list of objects: fix it there, and the cards come back.";
        add.disabled = true;
        return;
      }
      note.textContent = "Edit here or in the JSON below: both write the same JSON.";
      add.disabled = false;
      list.forEach(function (item, i) { panel.appendChild(CARDS[name](item, i, list, save, draw)); });
    }
    add.addEventListener("click", function () {
      list.push(JSON.parse(JSON.stringify(BLANKS[name])));
      save();
      draw();
    });
    textarea.addEventListener("input", function () { if (!box.writing) draw(); });
    var label = row.querySelector("label");
    label.insertAdjacentElement("afterend", el("div", { "class": "adminui-card-editor" }, [note, panel, el("p", {}, [add])]));
    draw();
  }

  // The first tool's name in the tools box, for the guardrails example (a rule names a tool).
  function firstToolName() {
    var tools = document.getElementById("id_tools");
    try {
      var list = JSON.parse(tools ? tools.value : "[]");
      return Array.isArray(list) && list[0] && typeof list[0].name === "string" ? list[0].name : null;
    } catch (e) {
      return null;
    }
  }

  // "Insert example": into an empty box (or one holding only null, {} or []).
  function exampleButton(name, textarea) {
    var box = new Box(textarea);
    var row = document.getElementById("row-" + name);
    var button = el("button", { type: "button", "class": "button", id: name + "-example", text: "Insert example" });
    var said = el("span", { "class": "quiet", role: "status" });
    button.addEventListener("click", function () {
      var text = box.text().trim();
      var example = JSON.parse(JSON.stringify(EXAMPLES[name]));
      if (name === "guardrails") example.rules[0].tool = firstToolName() || example.rules[0].tool;
      if (name === "tools" || name === "skills") {
        var list;
        try { list = text ? JSON.parse(text) : []; } catch (e) { list = null; }
        if (!Array.isArray(list)) { said.textContent = "Fix the JSON first: it is not a list."; return; }
        list.push(example);
        box.write(JSON.stringify(list, null, 2));
      } else if (["", "null", "{}", "[]"].indexOf(text.replace(/\s+/g, "")) >= 0) {
        box.write(JSON.stringify(example, null, 2));
      } else {
        said.textContent = "The box is not empty: clear it to insert the example.";
        return;
      }
      said.textContent = "Inserted: edit it to fit.";
    });
    row.appendChild(el("p", { "class": "adminui-example" }, [button, document.createTextNode(" "), said]));
  }

  function start() {
    ["tools", "skills"].forEach(function (name) {
      var textarea = document.getElementById("id_" + name);
      if (textarea) enhance(name, textarea);
    });
    Object.keys(EXAMPLES).forEach(function (name) {
      var textarea = document.getElementById("id_" + name);
      if (textarea) exampleButton(name, textarea);
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
