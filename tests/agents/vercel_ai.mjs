// The Vercel AI SDK's default OpenAI provider, `openai(id)` (the Responses API), against the
// gateway: generateText, streamText and a tool call. Prints one JSON line.
// node vercel_ai.mjs <node_modules dir> <base URL> <key> <model>
import { createRequire } from "node:module";
import path from "node:path";

const [modules, baseURL, apiKey, model] = process.argv.slice(2);
const require = createRequire(path.join(modules, "noop.js"));
const { generateText, streamText } = await import(require.resolve("ai"));
const { createOpenAI } = await import(require.resolve("@ai-sdk/openai"));

const openai = createOpenAI({ baseURL, apiKey });
const out = {};
const made = await generateText({ model: openai(model), prompt: "Hello there, gateway!", maxOutputTokens: 100 });
out.text = made.text;
out.usage = { input: made.usage.inputTokens, output: made.usage.outputTokens };
const streamed = streamText({ model: openai(model), prompt: "Hello there, gateway!" });
let text = "";
for await (const piece of streamed.textStream) text += piece;
out.streamed = text;
out.streamUsage = (await streamed.usage).outputTokens;
try {
  await generateText({ model: createOpenAI({ baseURL, apiKey: "sk-up-wrong" })(model), prompt: "x", maxRetries: 0 });
} catch (e) {
  out.error = { status: e.statusCode, name: e.name };
}
console.log(JSON.stringify(out));
