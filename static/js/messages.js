// What students read when something goes wrong. The server's own message when it is Chinese
// (the gateway writes those for students, e.g. "AI 模型暂时不可用，请稍后重试。"); otherwise plain
// Chinese chosen by error code (DESIGN §4) or HTTP status, so English internals such as
// "token_invalid" never reach the page.

const BY_CODE = {
  40001: "问题格式不对，请修改后重试。",
  40101: "登录已失效，请刷新页面重新登录。",
  40102: "登录已过期，请重新登录",
  50001: "校园服务出现内部错误，请稍后重试。",
  50002: "出了点问题，请稍后重试。",
  50003: "服务响应超时或暂时不可用，请稍后重试。",
};

const BY_STATUS = {
  400: "问题格式不对，请修改后重试。",
  401: "登录已失效，请刷新页面重新登录。",
  403: "没有权限执行这个操作，请刷新页面后重试。",
  404: "这个对话不存在或已被删除。",
  413: "问题太长了，请精简后重试。",
  429: "提问太频繁了，请稍等片刻再试。",
};

export const NETWORK_FAILED = "网络连接失败，请检查网络后重试。";
export const STREAM_CUT = "连接意外中断，回答可能不完整。";
export const DELETE_FAILED = "删除失败，请稍后重试。";
export const RENAME_FAILED = "重命名失败，请稍后重试。";
export const SEARCH_FAILED = "搜索失败，请稍后重试。";
export const FEEDBACK_FAILED = "评价没有保存，请稍后重试。";
export const COPY_DONE = "已复制";
export const CAMPUS_LOGIN_EXPIRED = "登录已过期，请重新登录";
export const CAMPUS_LOGIN_BUTTON = "用校园账号重新登录";
export const APPROVAL_TITLE = "需要你确认后才会执行";
export const APPROVAL_APPROVE = "批准";
export const APPROVAL_REJECT = "拒绝";
export const APPROVAL_UNTIL = (time) => `请在 ${time} 前决定，逾时视为拒绝。`;
export const APPROVAL_SENT = { approve: "已批准，正在执行…", reject: "已拒绝。" };
export const APPROVAL_FAILED = "没有提交成功，请重试。";
export const APPROVAL_WAITING = "等待你确认…";
// A call whose service needs the student's own account first (the `authorization_required` frame).
export const AUTHORIZATION_TITLE = (service) => `需要先连接“${service}”账号才能继续`;
export const AUTHORIZATION_HINT = (time) => `在打开的页面里登录并同意后，这里会自动继续。请在 ${time} 前完成。`;
export const AUTHORIZATION_OPEN = (service) => `连接“${service}”账号`;
export const AUTHORIZATION_DECLINE = "不连接";
export const AUTHORIZATION_SENT = { open: "已打开授权页面，完成后会自动继续…", reject: "已选择不连接。" };
export const AUTHORIZATION_WAITING = "等待你连接账号…";
// A call whose MCP server asks the student something (the `elicitation_required` frame).
export const ELICITATION_TITLE = (service) => `“${service}”需要你回答`;
export const ELICITATION_HINT = (time) => `请在 ${time} 前回答，逾时视为取消。`;
export const ELICITATION_SUBMIT = "提交";
export const ELICITATION_DECLINE = "不回答";
export const ELICITATION_OPEN = (host) => `打开 ${host}`;
export const ELICITATION_DONE = "我已完成";
export const ELICITATION_URL_NOTE = "这个链接由服务提供，请确认网址可信后再打开。";
export const ELICITATION_SENT = { accept: "已提交，正在继续…", decline: "已选择不回答。", open: "已打开页面，完成后点“我已完成”。" };
export const ELICITATION_WAITING = "等待你回答…";
export const ELICITATION_PICK = "请选择";
export const ELICITATION_PICK_SOME = "请至少选一项。";
export const ATTACHMENT_UPLOADING = "上传中…";
export const ATTACHMENT_FAILED = "上传失败，请重试。";
export const ATTACHMENT_REMOVE = (name) => `移除附件 ${name}`;
export const ATTACHMENT_LIMIT = (max) => `一条消息最多 ${max} 个附件。`;
export const ATTACHMENT_NO_IMAGES = "这个智能体看不到图片，只会知道文件名";
export const ATTACHMENT_TEXT_CUT = "文字过长，只会读前面一部分";
export const ATTACHMENT_WAIT = "附件还在上传，请稍候再发送。";
export const RETRY = "重试";
export const RETRY_IN = (seconds) => `${seconds} 秒后可重试`;
export const TOO_LONG = (over, max) => `问题超过 ${max} 字（多了 ${over} 字），请删减后再发送。`;
export const COUNT = (used, max) => `${used} / ${max}`;

const CJK = /[\u4e00-\u9fff]/;

export function errorText({ code, status, message } = {}) {
  if (typeof message === "string" && CJK.test(message)) return message.slice(0, 300);
  return BY_CODE[code] || BY_STATUS[status] || (status ? `服务暂时不可用（${status}），请稍后重试。` : BY_CODE[50002]);
}
