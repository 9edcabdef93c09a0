// What a TypeScript client writes against the generated types: if the
// document's shapes stop being usable (an operation's result no longer tells
// its type apart, a path or an error shape goes missing), this stops compiling.
import type { components, paths } from "./sgw";

type Operation = components["schemas"]["Operation"];
type Problem = components["schemas"]["Problem"];

export function describeOperation(op: Operation): string {
  if (op.result === null) return `${op.id} is ${op.status}`;
  switch (op.type) {
    case "post.publish":
    case "post.retry":
      return `${op.result.postId}: ${op.result.status}, ${op.result.targets.length} target(s)`;
    case "comment.reply":
      return `reply ${op.result.commentId} (${op.result.platformCommentId})`;
    case "comment.bulk":
      return `bulk ${op.id}: ${op.result.items.filter((i) => i.status === "succeeded").length} of ${op.result.items.length} done`;
    default:
      return `${op.type} on ${op.result.commentId}`;
  }
}

export type CreatePostBody =
  paths["/api/v1/posts"]["post"]["requestBody"]["content"]["application/json"];
export type CreatePostAccepted =
  paths["/api/v1/posts"]["post"]["responses"]["202"]["content"]["application/json"];
export type InvalidJson =
  paths["/api/v1/posts"]["post"]["responses"]["400"]["content"]["application/problem+json"];

export function problemLine(p: Problem): string {
  return `${p.status} ${p.code}: ${p.detail ?? p.title} (${p.requestId})`;
}
