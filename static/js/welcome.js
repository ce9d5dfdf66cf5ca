// The empty conversation's welcome, built from the selected agent's enabled catalog (page state
// `catalogs`): what it can help with, and example questions staff set per sub-agent.
import { el } from "./view.js";
import { t } from "./i18n.js";

export function welcomeRender(node, catalog) {
  const name = catalog?.name || t("校园小智");
  const services = catalog?.services || [];
  const examples = catalog?.examples || [];
  const parts = [el("h2", "", t("你好，我是%s", name))];
  if (services.length) {
    parts.push(el("p", "", t("我可以帮你：")));
    const list = el("ul", "welcome-services");
    for (const service of services) {
      const item = el("li");
      item.append(el("strong", "", service.label));
      if (service.summary) item.append(document.createTextNode(t("：%s", service.summary)));
      list.append(item);
    }
    parts.push(list);
  } else {
    parts.push(el("p", "", t("目前还没有接入校园服务，可以先和我聊聊。")));
  }
  if (examples.length) {
    const box = el("div", "welcome-examples");
    box.setAttribute("aria-label", t("示例问题"));
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
