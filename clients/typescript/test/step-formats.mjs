// stepGemini and stepBedrockConverse on the committed dist/, run by
// tests/client/test_typescript_client.py against a live registry and the provider stand-in. Each
// `create` posts the REST body as the SDKs do (Gemini's generateContent, Bedrock's Converse).
// Prints one JSON line: per format, each step's text and tool calls.

import { Registry, stepBedrockConverse, stepGemini } from "../dist/index.js";

const env = (name) => process.env[name] ?? "";
const post = async (path, body) => {
  const response = await fetch(`${env("PROVIDER_URL")}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (!response.ok) throw new Error(`${response.status}: ${await response.text()}`);
  return response.json();
};
const gemini = ({ model, ...body }) => post(`/v1beta/models/${encodeURIComponent(model)}:generateContent`, body);
const bedrock = ({ modelId, ...body }) => post(`/model/${encodeURIComponent(modelId)}/converse`, body);
const formats = {
  gemini: [stepGemini, gemini, { role: "user", parts: [{ text: "Refund order 7, please." }] }],
  "bedrock-converse": [stepBedrockConverse, bedrock, { role: "user", content: [{ text: "Refund order 7, please." }] }],
};

const registry = new Registry(env("REGISTRY_URL"), env("AGENT_KEY"));
const out = {};
for (const [format, [stepOf, create, first]] of Object.entries(formats)) {
  const session = await registry.startSession("refunds");
  try {
    const seen = [];
    let step = await stepOf(session, create, [first]);
    seen.push({ text: step.text, calls: step.toolCalls });
    while (!step.done) {
      const results = Object.fromEntries(step.toolCalls.map((c) => [c.id, `refunded ${c.arguments.order_id}`]));
      step = await stepOf(session, create, step.withToolResults(results), { response: step.reply });
      seen.push({ text: step.text, calls: step.toolCalls });
    }
    out[format] = seen;
  } finally {
    await session.end();
  }
}
console.log(JSON.stringify(out));
