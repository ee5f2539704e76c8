export { Bundle, BundleCache, Retry } from "./core.js";
export { Conflict, IntegrityError, InvalidRequest, ModelRetired, NotAuthenticated, NotFound, PermissionDenied, RegistryError, SessionEnded, Throttled, Unavailable, VersionRevoked, } from "./errors.js";
export { PinnedSession, Registry, TURN_FORMATS, turnConversation, wholeRequest } from "./registry.js";
export { anthropicRequest, openaiRequest } from "./providers.js";
export { registryFetch } from "./wire.js";
export { stepAnthropic, stepBedrockConverse, stepGemini, stepOpenAIChat, stepOpenAIResponses } from "./step.js";
