// The TypeScript SDK (@anthropic-ai/sdk) against a running gateway: a message, a stream through
// its helper, count_tokens and an authentication error. Prints one JSON object of what it saw.
// Usage: SDK_DIR=<dir with node_modules/@anthropic-ai/sdk> node sdk_node.cjs BASE_URL KEY MODEL
const path = require("path");
const mod = require(path.join(process.env.SDK_DIR, "node_modules", "@anthropic-ai", "sdk"));
const Anthropic = mod.default || mod.Anthropic || mod;
const [baseURL, apiKey, model] = process.argv.slice(2);
const messages = [{ role: "user", content: "Hello there, gateway!" }];

(async () => {
  const client = new Anthropic({ baseURL, apiKey, maxRetries: 0 });
  const out = {};
  const msg = await client.messages.create({ model, max_tokens: 100, messages });
  out.text = msg.content.map((b) => b.text || "").join("");
  out.usage = msg.usage;
  const stream = client.messages.stream({ model, max_tokens: 100, messages });
  let streamed = "";
  stream.on("text", (t) => { streamed += t; });
  const final = await stream.finalMessage();
  out.streamed = streamed;
  out.stream_output_tokens = final.usage.output_tokens;
  out.count = (await client.messages.countTokens({ model, messages })).input_tokens;
  try {
    await new Anthropic({ baseURL, apiKey: "sk-up-" + "x".repeat(40), maxRetries: 0 })
      .messages.create({ model, max_tokens: 10, messages });
  } catch (e) {
    out.error = { cls: e.constructor.name, status: e.status, type: e.error?.error?.type,
                  code: e.error?.error?.code, request_id: e.requestID };
  }
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(String(e)); process.exit(1); });
