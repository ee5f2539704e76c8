export { Bundle, BundleCache, Retry } from "./core.js";
export type { Content, RetryOptions } from "./core.js";
export {
  Conflict,
  IntegrityError,
  InvalidRequest,
  ModelRetired,
  NotAuthenticated,
  NotFound,
  PermissionDenied,
  RegistryError,
  SessionEnded,
  Throttled,
  Unavailable,
  VersionRevoked,
} from "./errors.js";
export { PinnedSession, Registry, TURN_FORMATS, turnConversation, wholeRequest } from "./registry.js";
export type {
  CallOptions,
  CompactResult,
  EndOptions,
  Message,
  Outcome,
  RegistryOptions,
  RenderResult,
  RequestOptions,
  RequestReuse,
  RouteResult,
  ScoreOptions,
  SessionInfo,
  StartOptions,
  TurnFormat,
  TurnOptions,
  TurnPrefixBody,
  TurnResult,
  TurnUsage,
} from "./registry.js";
export type { components, paths } from "./openapi.js";
export type { TraceHeaders } from "./tracing.js";
export { anthropicRequest, openaiRequest } from "./providers.js";
export { registryFetch } from "./wire.js";
export type { RegistryFetch, RegistryFetchOptions, WireFormat } from "./wire.js";
export { stepAnthropic, stepBedrockConverse, stepGemini, stepOpenAIChat, stepOpenAIResponses } from "./step.js";
export type { Step, StepFormat, StepOptions, ToolCall } from "./step.js";
export type {
  AnthropicMessage,
  AnthropicParams,
  AnthropicTurnRequest,
  BedrockConverseTurnRequest,
  GeminiTurnRequest,
  OpenAIChatTurnRequest,
  OpenAIMessage,
  OpenAIParams,
  OpenAIResponsesItem,
  OpenAIResponsesTurnRequest,
  RegistryTool,
  TextBlock,
  ToolInputSchema,
  TurnRequest,
} from "./providers.js";
