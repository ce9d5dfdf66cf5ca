// The form an MCP server asks the student to fill in (an `elicitation_required` frame in form
// mode): one field per property of its JSON Schema, which MCP keeps flat and primitive — strings
// (with a `format`, a length), numbers and integers (with bounds), booleans, single-choice enums
// (`enum`, or `oneOf` of `{const, title}`) and multi-choice arrays of them. The defaults the frame
// carries (SEP-1034, picked on the server) are filled in; the browser checks what it can
// (required, type, bounds) before anything is sent, and the server checks the rest again.

import { ELICITATION_PICK, ELICITATION_PICK_SOME } from "./messages.js";

const INPUT_TYPE = { email: "email", uri: "url", date: "date", "date-time": "datetime-local" };
const MAX_TEXT = 2000; // the server refuses longer strings (MAX_ELICITATION_TEXT)

function node(tag, className, text) {
  const element = document.createElement(tag);
  if (className) element.className = className;
  if (text !== undefined) element.textContent = text;
  return element;
}

// [value, label] of a single-choice field, or null when it is not one.
function choicesOf(field) {
  if (Array.isArray(field.enum)) {
    const names = Array.isArray(field.enumNames) ? field.enumNames : [];
    return field.enum.map((value, i) => [String(value), String(names[i] ?? value)]);
  }
  const options = Array.isArray(field.oneOf) ? field.oneOf : Array.isArray(field.anyOf) ? field.anyOf : null;
  if (options && options.every((o) => o && typeof o === "object" && "const" in o)) {
    return options.map((o) => [String(o.const), String(o.title ?? o.const)]);
  }
  return null;
}

function itemChoices(field) {
  return field.type === "array" && field.items && typeof field.items === "object" ? choicesOf(field.items) : null;
}

let formCount = 0;

// Builds the form's fields into `form`; returns `read()`, which gives the content to send (or
// null after showing the browser's message on the first field that does not pass).
export function elicitationFields(form, schema, defaults = {}) {
  const properties = schema && typeof schema.properties === "object" && schema.properties ? schema.properties : {};
  const required = new Set(Array.isArray(schema?.required) ? schema.required : []);
  const prefix = `elicit-${++formCount}`;
  const readers = [];
  Object.entries(properties).forEach(([name, field], index) => {
    if (!field || typeof field !== "object") return;
    const id = `${prefix}-${index}`;
    const title = String(field.title || name);
    const has = Object.prototype.hasOwnProperty.call(defaults, name);
    const initial = has ? defaults[name] : undefined;
    const row = node("div", "elicitation-field");
    const hint = field.description ? node("p", "elicitation-hint", String(field.description)) : null;
    if (hint) hint.id = `${id}-hint`;
    const describe = (control) => { if (hint) control.setAttribute("aria-describedby", hint.id); };
    const many = itemChoices(field);
    const choices = choicesOf(field);
    if (many) {
      const group = node("fieldset", "elicitation-choices");
      group.append(node("legend", "", title + (required.has(name) ? " *" : "")));
      const boxes = many.map(([value, label]) => {
        const option = node("label", "elicitation-choice");
        const box = node("input");
        box.type = "checkbox";
        box.value = value;
        box.checked = Array.isArray(initial) && initial.map(String).includes(value);
        option.append(box, document.createTextNode(label));
        group.append(option);
        return box;
      });
      if (hint) group.append(hint);
      row.append(group);
      readers.push(() => {
        const picked = boxes.filter((b) => b.checked).map((b) => b.value);
        if (required.has(name) && !picked.length) {
          boxes[0]?.setCustomValidity(ELICITATION_PICK_SOME);
          boxes[0]?.reportValidity();
          boxes[0]?.setCustomValidity("");
          return { ok: false };
        }
        return picked.length || required.has(name) ? { ok: true, name, value: picked } : { ok: true };
      });
      form.append(row);
      return;
    }
    const label = node("label", "elicitation-label", title + (required.has(name) ? " *" : ""));
    label.htmlFor = id;
    let control;
    if (field.type === "boolean") {
      control = node("input");
      control.type = "checkbox";
      control.checked = initial === true;
      row.classList.add("elicitation-check");
      row.append(control, label);
      readers.push(() => ({ ok: true, name, value: control.checked }));
    } else if (choices) {
      control = node("select");
      if (!has) {
        const empty = node("option", "", ELICITATION_PICK);
        empty.value = "";
        control.append(empty);
      }
      for (const [value, text] of choices) {
        const option = node("option", "", text);
        option.value = value;
        option.selected = has && String(initial) === value;
        control.append(option);
      }
      row.append(label, control);
      readers.push(() => (control.value === "" ? { ok: true } : { ok: true, name, value: control.value }));
    } else {
      control = node("input");
      const numeric = field.type === "number" || field.type === "integer";
      control.type = numeric ? "number" : INPUT_TYPE[field.format] || "text";
      if (numeric) {
        control.step = field.type === "integer" ? "1" : "any";
        if (Number.isFinite(field.minimum)) control.min = String(field.minimum);
        if (Number.isFinite(field.maximum)) control.max = String(field.maximum);
      } else {
        control.maxLength = Math.min(Number.isInteger(field.maxLength) ? field.maxLength : MAX_TEXT, MAX_TEXT);
        if (Number.isInteger(field.minLength)) control.minLength = field.minLength;
      }
      if (has && initial !== null) control.value = String(initial);
      row.append(label, control);
      readers.push(() => {
        if (control.value === "") return { ok: true };
        if (!numeric) return { ok: true, name, value: control.value };
        const number = Number(control.value);
        return { ok: true, name, value: field.type === "integer" ? Math.trunc(number) : number };
      });
    }
    control.id = id;
    control.name = name;
    if (required.has(name) && field.type !== "boolean") control.required = true;
    describe(control);
    if (hint) row.append(hint);
    form.append(row);
  });
  return () => {
    if (!form.reportValidity()) return null;
    const content = {};
    for (const reader of readers) {
      const read = reader();
      if (!read.ok) return null;
      if (read.name !== undefined) content[read.name] = read.value;
    }
    return content;
  };
}
