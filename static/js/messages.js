import { LOCALE, t } from "./i18n.js";

// What students read when something goes wrong. The server's own message when it is a sentence
// in the page's language (the gateway writes those for students in the request's language, e.g.
// "AI 模型暂时不可用，请稍后重试。" / "The AI model is unavailable right now. Please try again
// later."); otherwise a sentence chosen by error code (docs/design.md#the-chat-stream) or HTTP status, so machine words
// such as "token_invalid" never reach the page.

const BY_CODE = {
  40001: t("问题格式不对，请修改后重试。"),
  40101: t("登录已失效，请刷新页面重新登录。"),
  40102: t("登录已过期，请重新登录"),
  50001: t("校园服务出现内部错误，请稍后重试。"),
  50002: t("出了点问题，请稍后重试。"),
  50003: t("服务响应超时或暂时不可用，请稍后重试。"),
};

const BY_STATUS = {
  400: t("问题格式不对，请修改后重试。"),
  401: t("登录已失效，请刷新页面重新登录。"),
  403: t("没有权限执行这个操作，请刷新页面后重试。"),
  404: t("这个对话不存在或已被删除。"),
  413: t("问题太长了，请精简后重试。"),
  429: t("提问太频繁了，请稍等片刻再试。"),
};

export const NETWORK_FAILED = t("网络连接失败，请检查网络后重试。");
export const STREAM_CUT = t("连接意外中断，回答可能不完整。");
export const DELETE_FAILED = t("删除失败，请稍后重试。");
export const RENAME_FAILED = t("重命名失败，请稍后重试。");
export const SEARCH_FAILED = t("搜索失败，请稍后重试。");
export const FEEDBACK_FAILED = t("评价没有保存，请稍后重试。");
export const COPY_DONE = t("已复制");
export const CAMPUS_LOGIN_EXPIRED = t("登录已过期，请重新登录");
export const CAMPUS_LOGIN_BUTTON = t("用校园账号重新登录");
export const APPROVAL_TITLE = t("需要你确认后才会执行");
export const APPROVAL_APPROVE = t("批准");
export const APPROVAL_REJECT = t("拒绝");
export const APPROVAL_UNTIL = (time) => t("请在 %s 前决定，逾时视为拒绝。", time);
export const APPROVAL_SENT = { approve: t("已批准，正在执行…"), reject: t("已拒绝。") };
export const APPROVAL_FAILED = t("没有提交成功，请重试。");
export const APPROVAL_WAITING = t("等待你确认…");
// A call whose service needs the student's own account first (the `authorization_required` frame).
export const AUTHORIZATION_TITLE = (service) => t("需要先连接“%s”账号才能继续", service);
export const AUTHORIZATION_HINT = (time) => t("在打开的页面里登录并同意后，这里会自动继续。请在 %s 前完成。", time);
export const AUTHORIZATION_OPEN = (service) => t("连接“%s”账号", service);
export const AUTHORIZATION_DECLINE = t("不连接");
export const AUTHORIZATION_SENT = { open: t("已打开授权页面，完成后会自动继续…"), reject: t("已选择不连接。") };
export const AUTHORIZATION_WAITING = t("等待你连接账号…");
// A call whose MCP server asks the student something (the `elicitation_required` frame).
export const ELICITATION_TITLE = (service) => t("“%s”需要你回答", service);
export const ELICITATION_HINT = (time) => t("请在 %s 前回答，逾时视为取消。", time);
export const ELICITATION_SUBMIT = t("提交");
export const ELICITATION_DECLINE = t("不回答");
export const ELICITATION_OPEN = (host) => t("打开 %s", host);
export const ELICITATION_DONE = t("我已完成");
export const ELICITATION_URL_NOTE = t("这个链接由服务提供，请确认网址可信后再打开。");
export const ELICITATION_SENT = { accept: t("已提交，正在继续…"), decline: t("已选择不回答。"), open: t("已打开页面，完成后点“我已完成”。") };
export const ELICITATION_WAITING = t("等待你回答…");
export const ELICITATION_PICK = t("请选择");
export const ELICITATION_PICK_SOME = t("请至少选一项。");
export const ATTACHMENT_UPLOADING = t("上传中…");
export const ATTACHMENT_FAILED = t("上传失败，请重试。");
export const ATTACHMENT_REMOVE = (name) => t("移除附件 %s", name);
export const ATTACHMENT_LIMIT = (max) => t("一条消息最多 %s 个附件。", max);
export const ATTACHMENT_NO_IMAGES = t("这个智能体看不到图片，只会知道文件名");
export const ATTACHMENT_TEXT_CUT = t("文字过长，只会读前面一部分");
export const ATTACHMENT_WAIT = t("附件还在上传，请稍候再发送。");
export const RETRY = t("重试");
export const RETRY_IN = (seconds) => t("%s 秒后可重试", seconds);
export const TOO_LONG = (over, max) => t("问题超过 %s 字（多了 %s 字），请删减后再发送。", max, over);
export const COUNT = (used, max) => t("%s / %s", used, max);

const CJK = /[\u4e00-\u9fff]/;

// A server message written for students in the page's language: Chinese text on a Chinese page;
// on an English one, words without Chinese (a message from before the switch stays unshown).
function inPageLanguage(message) {
  if (typeof message !== "string" || !message) return false;
  return LOCALE === "en" ? !CJK.test(message) && /\s/.test(message.trim()) : CJK.test(message);
}

export function errorText({ code, status, message } = {}) {
  if (inPageLanguage(message)) return message.slice(0, 300);
  return BY_CODE[code] || BY_STATUS[status] || (status ? t("服务暂时不可用（%s），请稍后重试。", status) : BY_CODE[50002]);
}
