/** Hand a render to the official SDKs (`@anthropic-ai/sdk`, `openai`) without copying fields
 * by hand. Pure functions with no import of either SDK: the objects they return have the
 * shape of `client.messages.create(...)` / `client.chat.completions.create(...)` params.
 *
 * The rules are those of docs/rendering.md: the prefix (tools, then system) goes unchanged so
 * that the provider's prompt cache holds; the volatile tail is appended to the newest user
 * message (or sent as one more user message when the last message is not the user's). */
import type { RenderResult } from "./registry.js";
type Json = Record<string, unknown>;
/** A tool's input as a JSON Schema object (the registry's tools are Anthropic's shape). */
export interface ToolInputSchema {
    type: "object";
    [key: string]: unknown;
}
/** A tool as the registry serves it in a prefix: name, description, input_schema. */
export interface RegistryTool {
    name: string;
    description?: string;
    input_schema: ToolInputSchema;
    [key: string]: unknown;
}
/** A text block or part: what the helpers append the tail as. */
export interface TextBlock {
    type: "text";
    text: string;
}
/** An Anthropic message: the shape `messages.create` takes (`Anthropic.MessageParam`). */
export interface AnthropicMessage {
    role: string;
    content: string | readonly object[];
}
/** The blocks of a content (the elements of its list form). */
type BlockOf<C> = Exclude<C, string | null | undefined> extends readonly (infer B)[] ? B : never;
/** The content blocks a user message of `M` may hold (`M` a union by role, or one shape whose
 * role may be "user"). */
type UserBlockOf<M> = M extends {
    role: infer R;
    content: infer C;
} ? ("user" extends R ? BlockOf<C> : never) : never;
export interface AnthropicParams<M extends AnthropicMessage = AnthropicMessage> {
    model: string;
    max_tokens: number;
    system: {
        type: "text";
        text: string;
        cache_control: {
            type: "ephemeral";
        };
    }[];
    tools: RegistryTool[];
    /** The caller's messages; the newest user one with the tail appended as a text block. */
    messages: (M | {
        role: "user";
        content: string | (UserBlockOf<M> | TextBlock)[];
    })[];
}
/** Params for `anthropic.messages.create(...)`: the tools as the registry serves them (its
 * tool shape is Anthropic's: name, description, input_schema), the system text as one block
 * with a cache breakpoint, so tools + system are read from the cache on every later turn. */
export declare function anthropicRequest<M extends AnthropicMessage>(rendered: RenderResult, messages: readonly M[], options: {
    model: string;
    maxTokens: number;
}): AnthropicParams<M>;
/** An OpenAI Chat message: the shape `chat.completions.create` takes
 * (`OpenAI.ChatCompletionMessageParam`). */
export interface OpenAIMessage {
    role: string;
    content?: string | readonly object[] | null;
}
export interface OpenAIParams<M extends OpenAIMessage = OpenAIMessage> {
    model: string;
    /** The system text first, then the caller's messages, the newest user one with the tail. */
    messages: (M | {
        role: "system";
        content: string;
    } | {
        role: "user";
        content: string | (UserBlockOf<M> | TextBlock)[];
    })[];
    tools?: {
        type: "function";
        function: {
            name: string;
            description?: string;
            parameters: Json;
        };
    }[];
    prompt_cache_key: string;
}
/** Params for `openai.chat.completions.create(...)`: the system text first, each tool as a
 * function (input_schema as parameters), and `prompt_cache_key` = `prefix_sha256`, so turns
 * with the same prefix land on the same cache. */
export declare function openaiRequest<M extends OpenAIMessage>(rendered: RenderResult, messages: readonly M[], options: {
    model: string;
}): OpenAIParams<M>;
type JsonSchema = Record<string, unknown>;
/** `anthropic`: the body of `anthropic.messages.create(...)`. */
export interface AnthropicTurnRequest<M extends object = AnthropicMessage> {
    model: string;
    max_tokens: number;
    system: {
        type: "text";
        text: string;
        cache_control: {
            type: "ephemeral";
        };
    }[];
    tools?: RegistryTool[];
    stop_sequences?: string[];
    output_config?: {
        format: {
            type: "json_schema";
            schema: JsonSchema;
        };
    };
    messages: M[];
}
/** `openai-chat`: the body of `openai.chat.completions.create(...)`; the system text is the
 * first message. */
export interface OpenAIChatTurnRequest<M extends object = OpenAIMessage> {
    model: string;
    messages: (M | {
        role: "system";
        content: string;
    })[];
    tools?: {
        type: "function";
        function: {
            name: string;
            description: string;
            parameters: JsonSchema;
        };
    }[];
    max_completion_tokens?: number;
    temperature?: number;
    top_p?: number;
    stop?: string[];
    response_format?: {
        type: "json_schema";
        json_schema: {
            name: string;
            schema: JsonSchema;
        };
    };
    prompt_cache_key: string;
}
/** A Responses API input item (`OpenAI.Responses.ResponseInputItem`): a message or any other item. */
export interface OpenAIResponsesItem {
    type?: string | null;
    role?: string | null;
}
/** `openai-responses`: the body of `openai.responses.create(...)`. */
export interface OpenAIResponsesTurnRequest<M extends object = OpenAIResponsesItem> {
    model: string;
    instructions: string;
    input: M[];
    tools?: {
        type: "function";
        name: string;
        description: string;
        parameters: JsonSchema;
        strict: boolean;
    }[];
    max_output_tokens?: number;
    temperature?: number;
    top_p?: number;
    text?: {
        format: {
            type: "json_schema";
            name: string;
            schema: JsonSchema;
        };
    };
    prompt_cache_key: string;
}
/** `bedrock-converse`: the input of Bedrock's `ConverseCommand` (`@aws-sdk/client-bedrock-runtime`). */
export interface BedrockConverseTurnRequest<M extends object = Record<string, unknown>> {
    modelId: string;
    system: ({
        text: string;
    } | {
        cachePoint: {
            type: "default";
        };
    })[];
    toolConfig?: {
        tools: {
            toolSpec: {
                name: string;
                description?: string;
                inputSchema: {
                    json: JsonSchema;
                };
            };
        }[];
    };
    inferenceConfig?: {
        maxTokens?: number;
        temperature?: number;
        topP?: number;
        stopSequences?: string[];
    };
    messages: M[];
}
/** `gemini`: the body of Gemini's `generateContent` (REST field names). */
export interface GeminiTurnRequest<M extends object = Record<string, unknown>> {
    model: string;
    systemInstruction: {
        parts: {
            text: string;
        }[];
    };
    tools?: {
        functionDeclarations: {
            name: string;
            description: string;
            parametersJsonSchema: JsonSchema;
        }[];
    }[];
    generationConfig?: {
        maxOutputTokens?: number;
        temperature?: number;
        topP?: number;
        stopSequences?: string[];
        responseMimeType?: string;
        responseJsonSchema?: JsonSchema;
    };
    contents: M[];
}
/** The request body `session.turn()` answers for `format` `F`, the conversation typed `M`. */
export type TurnRequest<F, M extends object> = F extends "anthropic" ? AnthropicTurnRequest<M> : F extends "openai-chat" ? OpenAIChatTurnRequest<M> : F extends "openai-responses" ? OpenAIResponsesTurnRequest<M> : F extends "bedrock-converse" ? BedrockConverseTurnRequest<M> : F extends "gemini" ? GeminiTurnRequest<M> : undefined;
export {};
