// The empty conversation's welcome, built from the selected agent's enabled catalog (page state
// `catalogs`): what it can help with, and example questions staff set per sub-agent.
import { el } from "./view.js";

export function welcomeRender(node, catalog) {
  const name = catalog?.name || "校园小智";
  const services = catalog?.services || [];
  const examples = catalog?.examples || [];
  const parts = [el("h2", "", `你好，我是${name}`)];
  if (services.length) {
    parts.push(el("p", "", "我可以帮你："));
    const list = el("ul", "welcome-services");
    for (const service of services) {
      const item = el("li");
      item.append(el("strong", "", service.label));
      if (service.summary) item.append(document.createTextNode(`：${service.summary}`));
      list.append(item);
    }
    parts.push(list);
  } else {
    parts.push(el("p", "", "目前还没有接入校园服务，可以先和我聊聊。"));
  }
  if (examples.length) {
    const box = el("div", "welcome-examples");
    box.setAttribute("aria-label", "示例问题");
    for (const question of examples) {
      const button = el("button", "example-question", question);
      button.type = "button";
      button.dataset.question = question;
      box.append(button);
    }
    parts.push(box);
  }
  node.replaceChildren(...parts);
}
