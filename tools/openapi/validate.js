// Validates an OpenAPI document against the OpenAPI 3.1 schema and resolves
// every $ref in it: node validate.js lib/openapi.json
"use strict";
const SwaggerParser = require("@apidevtools/swagger-parser");

SwaggerParser.validate(process.argv[2]).then(
  () => {},
  (err) => {
    console.error(`${process.argv[2]} is not a valid OpenAPI 3.1 document:\n${err.message}`);
    process.exit(1);
  },
);
