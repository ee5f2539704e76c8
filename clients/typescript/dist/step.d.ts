/** One step of an agent loop with an official SDK: the turn call, the request sent with the
 * SDK's `create`, the reply appended in the format's shape (the Python client's `session.step`).
 *
 * The SDK's call is passed as a function, `(body) => anthropic.messages.create(body)`, so this
 * package imports neither SDK (not even its types) and the SDK picks its own overload: the
 * reply is typed as the SDK types it. */
import type { AnthropicMessage, AnthropicTurnRequest, BedrockConverseTurnRequest, GeminiTurnRequest, OpenAIChatTurnRequest, OpenAIMessage, OpenAIResponsesTurnRequest } from "./providers.js";
import type { CallOptions, PinnedSession, TurnResult, TurnUsage } from "./registry.js";
/** A tool the model asked to run: the call's id (to answer it), the tool's name, its input. */
export interface ToolCall {
    id: string;
    name: string;
    arguments: Record<string, unknown>;
}
export type StepFormat = "anthropic" | "openai-chat" | "openai-responses" | "gemini" | "bedrock-converse";
export interface Step<F extends StepFormat, M extends object, R> {
    turn: TurnResult<F, M>;
    /** The SDK's reply, as the SDK typed it. */
    reply: R;
    /** The conversation for the next step: the turn's (compacted) messages, then the reply. */
    messages: M[];
    toolCalls: ToolCall[];
    /** The model asked for no tool. */
    done: boolean;
    text: string;
    /** `messages` with each call answered by its id, in the format's shape, for the next step. */
    withToolResults(results: Record<string, string>): M[];
}
export interface StepOptions extends CallOptions {
    invoked?: string[];
    variables?: Record<string, unknown>;
    /** The previous step's `reply`, reported with this turn (the version's evidence). */
    response?: unknown;
    usage?: TurnUsage;
}
/** A step with `@anthropic-ai/sdk`: `stepAnthropic(session, (body) => anthropic.messages.create(body), messages)`. */
export declare function stepAnthropic<M extends AnthropicMessage, R extends {
    content: readonly object[];
}>(session: PinnedSession, create: (body: AnthropicTurnRequest<M>) => PromiseLike<R>, messages: readonly M[], options?: StepOptions): Promise<Step<"anthropic", M, R>>;
/** A step with `openai`'s Chat Completions: `stepOpenAIChat(session, (body) => openai.chat.completions.create(body), messages)`. */
export declare function stepOpenAIChat<M extends OpenAIMessage, R extends {
    choices: readonly {
        message: {
            content?: string | null;
            tool_calls?: readonly object[] | null;
        };
    }[];
}>(session: PinnedSession, create: (body: OpenAIChatTurnRequest<M>) => PromiseLike<R>, messages: readonly M[], options?: StepOptions): Promise<Step<"openai-chat", M, R>>;
/** A step with `openai`'s Responses API: `stepOpenAIResponses(session, (body) => openai.responses.create(body), input)`.
 * The reply's messages, reasoning items and calls are kept (a reasoning model needs its
 * reasoning items back). */
export declare function stepOpenAIResponses<M extends object, R extends {
    output: readonly object[];
    output_text?: string;
}>(session: PinnedSession, create: (body: OpenAIResponsesTurnRequest<M>) => PromiseLike<R>, input: readonly M[], options?: StepOptions): Promise<Step<"openai-responses", M, R>>;
/** A step with Gemini: `stepGemini(session, (body) => ..., contents)`, where the function sends
 * the REST body (`generateContent`; with `@google/genai`, `ai.models.generateContent({ model:
 * body.model, contents: body.contents, config: { systemInstruction: body.systemInstruction,
 * tools: body.tools, ...body.generationConfig } })`) and returns the response. The reply's
 * content is kept whole (its thought signatures included); each function call is answered by a
 * `functionResponse` with its id and name, `{ result: text }`. */
export declare function stepGemini<M extends object, R extends {
    candidates?: readonly {
        content?: object;
    }[];
}>(session: PinnedSession, create: (body: GeminiTurnRequest<M>) => PromiseLike<R>, contents: readonly M[], options?: StepOptions): Promise<Step<"gemini", M, R>>;
/** A step with Bedrock's Converse API: `stepBedrockConverse(session, (body) => client.send(new
 * ConverseCommand(body)), messages)` (`@aws-sdk/client-bedrock-runtime`). The reply's message is
 * kept whole; each `toolUse` is answered by a `toolResult` with its id, `[{ text }]`. */
export declare function stepBedrockConverse<M extends object, R extends {
    output?: {
        message?: object;
    };
}>(session: PinnedSession, create: (body: BedrockConverseTurnRequest<M>) => PromiseLike<R>, messages: readonly M[], options?: StepOptions): Promise<Step<"bedrock-converse", M, R>>;
